# inferd's serving image: ONNX Runtime on the CPU, run as a non-root user, the model
# repository mounted read-only at /models (deploy/kubernetes mounts one model version there).
#   docker build -t inferd .
#   docker run --rm -p 8000:8000 -p 8001:8001 -v "$PWD/models:/models:ro" inferd
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin inferd
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000 8001
VOLUME ["/models"]
ENTRYPOINT ["inferd"]
CMD ["serve", "--repo", "/models", "--host", "0.0.0.0", "--port", "8000", "--grpc-port", "8001"]
