"""What inferd's two front ends share: HTTP (inferd.server) and gRPC (inferd.grpc_v2) both stand
on this package and neither imports the other. The KServe V2 views and tensor codecs, the keys
and the bearer check, the recording of a finished request, route keys, the error code to HTTP
status table, and request fields validated against a schema.

Knows no web framework and no RPC library: plain values in, plain values (or inferd's errors)
out.
"""
