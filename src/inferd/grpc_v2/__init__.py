"""KServe V2 over gRPC: the protocol's messages (generated from kserve_v2.proto), the service on
inferd's engine, its health service, and the server that runs them beside HTTP."""
