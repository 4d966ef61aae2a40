"""The app runs its companions (gRPC, in `inferd serve`) in its lifespan: started before the
app serves, stopped after the engine drained and the jobs stopped, before the engine closes."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from inferd.composition import build_engine, open_jobs, read_access
from inferd.config.server_settings import ServerSettings
from inferd.server.app import create_app
from tests.models import affine_model


class Recording:
    name = "test"
    url = None

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.app: FastAPI | None = None

    async def start(self) -> None:
        self.steps.append("start")

    async def stop(self) -> None:
        assert self.app is not None
        engine, jobs = self.app.state.engine, self.app.state.jobs
        worker_stopped = jobs.worker._loop_task is None or jobs.worker._loop_task.done()
        self.steps.append(f"stop: accepting={engine.accepting} jobs stopped={worker_stopped}")


async def test_companions_start_first_and_stop_after_the_drain_and_the_jobs(
    tmp_path: Path,
) -> None:
    affine_model(tmp_path / "affine" / "1" / "model.onnx")
    settings = ServerSettings(repository=tmp_path, grpc_port=0)
    engine, metrics = build_engine(settings)
    companion = Recording()
    app = create_app(
        settings,
        engine,
        read_access(settings),
        open_jobs(settings, metrics),
        metrics,
        companions=[companion],
    )
    companion.app = app
    async with app.router.lifespan_context(app):
        companion.steps.append("serving")
    assert companion.steps == ["start", "serving", "stop: accepting=False jobs stopped=True"]
