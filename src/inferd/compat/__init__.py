"""What inferd uses of other projects' private APIs, each in one module, pinned to the releases
it was written for (pyproject.toml), with a contract test that fails loudly, naming what moved,
when an upgrade breaks it (tests/unit/compat/, and tests/integration/test_compat_ray.py for Ray,
which the fast tier does not import):

- `uvicorn_http`: uvicorn's httptools protocol and request cycle, which inferd's bounded HTTP
  protocol (inferd.server.http_limits) subclasses to bound and refuse requests before the app;
- `ray_internals`: Ray Serve's multiplexed model ids of a replica (so that they follow inferd's
  residency) and whether its direct ingress (HAProxy) is on.

Nothing else in inferd imports a private name of another project. (The gRPC stubs that
grpcio-tools generates check the grpcio version themselves.)"""
