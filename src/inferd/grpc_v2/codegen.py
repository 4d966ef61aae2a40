"""Regenerates the Python code of the protocol beside it: the messages of `kserve_v2.proto`
(and their type stubs), the gRPC stubs of `kserve_v2_service.proto` (not its descriptor: see
that file):

    python -m inferd.grpc_v2.codegen

The generated files are checked in (serving needs grpcio and protobuf, not grpcio-tools);
tests/unit/grpc_v2/test_generated.py fails when they differ from what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO = Path(__file__).with_name("kserve_v2.proto")
SERVICE = Path(__file__).with_name("kserve_v2_service.proto")
SOURCE_ROOT = Path(__file__).parents[2]
"""The folder holding the `inferd` package: the generated imports are `inferd.grpc_v2...`."""
GENERATED = ("kserve_v2_pb2.py", "kserve_v2_pb2.pyi", "kserve_v2_service_pb2_grpc.py")


def generate(into: Path) -> list[Path]:
    """Writes the generated files under `into` (as `into/inferd/grpc_v2/...`); their paths."""
    from grpc_tools import protoc  # (a development dependency)

    include = Path(protoc.__file__).parent / "_proto"
    paths = [f"-I{SOURCE_ROOT}", f"-I{include}"]
    runs = (
        [f"--python_out={into}", f"--pyi_out={into}", str(PROTO.relative_to(SOURCE_ROOT))],
        [f"--grpc_python_out={into}", str(SERVICE.relative_to(SOURCE_ROOT))],
    )
    for run in runs:
        code = protoc.main(["protoc", *paths, *run])
        if code != 0:
            raise RuntimeError(f"protoc failed ({code}) on {run[-1]}")
    folder = into / PROTO.parent.relative_to(SOURCE_ROOT)
    return [folder / name for name in GENERATED]


def main() -> int:
    written = generate(SOURCE_ROOT)
    print("\n".join(str(path) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
