# inferd's serving image: ONNX Runtime on the CPU, run as a non-root user, the model
# repository mounted read-only at /models (deploy/kubernetes mounts one model version there).
#   docker build -t inferd .
#   docker run --rm -p 8000:8000 -p 8001:8001 -v "$PWD/models:/models:ro" inferd
# Two stages. The first installs inferd and its dependencies (binary wheels only) into a virtual
# environment and removes what serving never loads: pip and setuptools, numpy's test
# suites, ONNX Runtime's offline tools. The second is the base image, a user and that
# environment: no compiler, no pip cache, no source tree. The environment keeps its compiled
# bytecode: the root filesystem is read-only, so nothing could be compiled and kept at start.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/inferd
WORKDIR /src
# the dependencies first, from pyproject.toml alone: a change of the source reuses their layer;
# with them the `otel` extra's, so that traces go out when OTEL_EXPORTER_OTLP_ENDPOINT is set
COPY pyproject.toml ./
RUN python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print(*p['dependencies'], *p['optional-dependencies']['otel'], sep='\n')" > requirements.txt \
 && /opt/inferd/bin/pip install --only-binary=:all: --requirement requirements.txt
COPY README.md ./
COPY src ./src
RUN /opt/inferd/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/inferd/bin/pip install --no-deps /wheels/inferd-*.whl \
 && /opt/inferd/bin/pip check \
 && /opt/inferd/bin/pip uninstall --yes pip setuptools \
 && cd /opt/inferd/lib/python3*/site-packages \
 && find . -depth -type d -name tests -path "./numpy/*" -exec rm -rf {} + \
 && rm -rf onnxruntime/tools onnxruntime/transformers onnxruntime/quantization \
           onnxruntime/datasets onnxruntime/backend \
 && /opt/inferd/bin/python -c "import inferd.cli.main, onnxruntime, numpy, uvloop, grpc, opentelemetry.sdk"

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/inferd/bin:$PATH
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin inferd
COPY --from=build /opt/inferd /opt/inferd
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000 8001
VOLUME ["/models"]
ENTRYPOINT ["/opt/inferd/bin/inferd"]
CMD ["serve", "--repo", "/models", "--host", "0.0.0.0", "--port", "8000", "--grpc-port", "8001"]
