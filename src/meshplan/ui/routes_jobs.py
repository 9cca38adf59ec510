"""The computing endpoints: quick answers (training memory and step estimate) inline, long ones
(plan searches, serving simulation, validation) as background jobs with progress over
server-sent events, cancellation, the `--json` download and the launch-config exports."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel

from meshplan.errors import ConfigError, MeshplanError
from meshplan.ui import work
from meshplan.ui.errors import check_body, check_no_server_files
from meshplan.ui.guard import check_web_model
from meshplan.ui.jobs import FINAL, Job
from meshplan.ui.schemas import (NAME_MAX, ServePlanRequest, SimulateRequest, TrainingEstimateRequest, TrainingRequest,
                                 TrainingSearchRequest)
from meshplan.ui.uploads import read_limited

router = APIRouter(prefix="/api", tags=["jobs"])
PAGE_ONLY = ("report", "why")
"""Result keys the page shows that the CLI's --json does not print."""
MEDIA_TYPES = {".json": "application/json", ".csv": "text/csv", ".html": "text/html",
               ".sh": "text/x-shellscript", ".toml": "application/toml", ".yaml": "application/yaml"}
"""The media type sent with a download, by its file extension."""
EXPORT_EXTENSIONS = {"megatron": ".sh", "torchtitan": ".toml", "deepspeed": ".json", "vllm": ".sh",
                     "sglang": ".sh"}
"""The file each launch-config target writes: Megatron-LM's, vLLM's and SGLang's launch scripts,
torchtitan's TOML job config, DeepSpeed's JSON config."""


class JobView(BaseModel):
    """A background job: its state, progress and, once done, its result or error."""

    id: str
    kind: str
    state: str
    done: int
    total: int
    error: str | None
    status: int | None
    created_s: float
    started_s: float | None
    finished_s: float | None
    input: dict
    result: dict | None = None


def _body(request: Request, req: BaseModel) -> dict:
    """The request as the dict the work functions take, an uploaded model resolved to its path."""
    check_body(req)
    body = req.model_dump(mode="json", exclude_unset=True)
    check_no_server_files(body)
    body["model"] = request.app.state.uploads.model(req.model)
    return body


# The quick answers take a few milliseconds of pure Python: run on the event loop, one after
# another, they finish in arrival order; in the thread pool a burst would time-slice the GIL and
# every request would wait for the whole burst. Pages with plots take longer: those go to the pool.
# The answer is plain JSON types already, so it is sent as it is: FastAPI's generic encoder walks
# every value again and cost more than a third of a quick answer.
async def _quick(func, body: dict, plots: bool) -> JSONResponse:
    return JSONResponse(await run_in_threadpool(func, body, True) if plots else func(body, False))


@router.post("/train/memory", response_model=dict)
async def train_memory(req: TrainingRequest, request: Request, plots: bool = False) -> JSONResponse:
    """Peak memory per GPU of a training plan, per pipeline stage (`train memory --json`)."""
    return await _quick(work.train_memory, _body(request, req), plots)


@router.post("/train/estimate", response_model=dict)
async def train_estimate(req: TrainingEstimateRequest, request: Request, plots: bool = False) -> JSONResponse:
    """One training step: time, tokens/s per GPU, MFU, breakdown (`train estimate --json`)."""
    return await _quick(work.train_estimate, _body(request, req), plots)


def _submit(request: Request, kind: str, body: dict) -> JSONResponse:
    if kind in work.CHECKS:
        work.CHECKS[kind](body)
    job = request.app.state.jobs.submit(kind, body)
    return JSONResponse(job.view(), status_code=202, headers={"Location": f"/api/jobs/{job.id}"})


@router.post("/train/plan", status_code=202, response_model=JobView)
def train_plan(req: TrainingSearchRequest, request: Request) -> JSONResponse:
    """Start a training layout search (`train plan --json` when done)."""
    return _submit(request, "train-plan", _body(request, req))


@router.post("/serve/simulate", status_code=202, response_model=JobView)
def serve_simulate(req: SimulateRequest, request: Request) -> JSONResponse:
    """Start a serving simulation (`serve simulate --json` when done)."""
    return _submit(request, "serve-simulate", _body(request, req))


@router.post("/serve/plan", status_code=202, response_model=JobView)
def serve_plan(req: ServePlanRequest, request: Request) -> JSONResponse:
    """Start a serving deployment search (`serve plan --json` when done)."""
    return _submit(request, "serve-plan", _body(request, req))


@router.post("/validate", status_code=202, response_model=JobView)
async def validate(request: Request, filename: str = Query("records.yaml", max_length=NAME_MAX)) -> JSONResponse:
    """Start validating a run-record YAML file sent as the request body (`validate --json`)."""
    from meshplan.validate.records import read_records

    data = await read_limited(request, filename)
    _, path = request.app.state.uploads.save(data, "records.yaml")
    try:
        records, _ = await run_in_threadpool(read_records, path)  # not a record file: said now
    except ConfigError as exc:
        raise ConfigError(str(exc).replace(str(path), filename)) from None
    for record in records:  # a record's model is never a file of this server
        if isinstance(record.model, str):
            check_web_model(record.model, f"{filename}: record {record.id!r}: model")
    return _submit(request, "validate", {"path": str(path), "filename": filename})


def _job(request: Request, job_id: str) -> Job:
    job = request.app.state.jobs.get(job_id)
    if job is None:
        raise ConfigError(f"job {job_id!r}: no such job on this server")
    return job


@router.get("/jobs", response_model=list[JobView])
def jobs(request: Request) -> list[dict]:
    """Every job the server holds, without results."""
    return [j.view(with_result=False) for j in request.app.state.jobs.list()]


@router.get("/jobs/{job_id}", response_model=JobView)
def job(job_id: str, request: Request) -> dict:
    """One job, with its result once done."""
    return _job(request, job_id).view()


@router.delete("/jobs/{job_id}", response_model=JobView)
def cancel(job_id: str, request: Request) -> dict:
    """Cancel a queued or running job (a finished one is left as it is)."""
    _job(request, job_id)
    return request.app.state.jobs.cancel(job_id).view(with_result=False)


@router.post("/jobs/{job_id}/cancel", response_model=JobView)
def cancel_post(job_id: str, request: Request) -> dict:
    """Cancel a job (for clients that cannot send DELETE)."""
    return cancel(job_id, request)


@router.get("/jobs/{job_id}/events")
async def events(job_id: str, request: Request) -> StreamingResponse:
    """Server-sent events: `progress` on every change of state or progress, then `end`."""
    job = _job(request, job_id)

    async def stream():
        seen = -1
        while True:
            if job.version != seen:
                seen = job.version
                final = job.state in FINAL
                yield _event("end" if final else "progress", job.view(with_result=False))
                if final:
                    return
            await asyncio.sleep(0.1)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


def _event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _result(request: Request, job_id: str) -> tuple[Job, dict]:
    job = _job(request, job_id)
    if job.state != "done":
        raise ConfigError(f"job {job_id}: no result to download while it is {job.state}")
    return job, job.result


@router.get("/jobs/{job_id}/json")
def download_json(job_id: str, request: Request) -> JSONResponse:
    """The job's result as the CLI's `--json` file (without the page's report and text)."""
    job, result = _result(request, job_id)
    data = {k: v for k, v in result.items() if k not in PAGE_ONLY}
    return JSONResponse(data, headers=_attachment(f"meshplan-{job.kind}-{job.id}.json"),
                        media_type=MEDIA_TYPES[".json"])


@router.get("/jobs/{job_id}/export/{target}")
def export(job_id: str, target: str, request: Request, index: int = 1) -> PlainTextResponse:
    """The launch config of plan `index` (1 = best) of a plan search: megatron, torchtitan or
    deepspeed for training plans (`train export`), vllm or sglang for serving (`serve export`)."""
    job, result = _result(request, job_id)
    plans = result.get("plans")
    if job.kind not in ("train-plan", "serve-plan"):
        raise ConfigError(f"job {job_id} is a {job.kind}: only plan searches export launch configs")
    if not plans or not 1 <= index <= len(plans):
        raise ConfigError(f"--index {index}: the search holds {len(plans or [])} plans")
    text, notes = (_export_training if job.kind == "train-plan" else _export_serving)(result, plans[index - 1], target)
    extension = EXPORT_EXTENSIONS[target]
    headers = _attachment(f"meshplan-{target}-{job.id}-{index}{extension}")
    if notes:  # what `train export` says on stderr; the file itself stays the engine's format
        headers["X-Meshplan-Retargeted"] = "; ".join(notes)
    return PlainTextResponse(text, headers=headers, media_type=MEDIA_TYPES[extension])


def _export_training(result: dict, entry: dict, target: str) -> tuple[str, list[str]]:
    from meshplan.cli.commands.train_export import export_entry

    return export_entry(entry, target)


def _export_serving(result: dict, entry: dict, target: str) -> tuple[str, list[str]]:
    from meshplan.cli.commands.serve_plan import hub_repo
    from meshplan.export.serving import export_serving
    from meshplan.serving.plan import ServingPlan

    try:
        plan = ServingPlan(**entry["plan"])
    except ValueError as exc:
        raise MeshplanError(str(exc).splitlines()[0]) from None
    from meshplan.cli.commands.serve_files import gpus_per_node

    gpu = entry.get("gpu") if isinstance(entry.get("gpu"), str) else None
    return export_serving(target, hub_repo(result["model"]), plan, gpus_per_node=gpus_per_node(gpu, None)), []


def _attachment(name: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{name}"'}
