"""The HTML pages (one per job, from one Jinja2 template; the form is built in the browser from
the request model's JSON schema) and the static files, plotly.js included from the installed
plotly package (no CDN)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True, slots=True)
class Page:
    """One page: its URL path, title, request schema, endpoint, and how it runs."""

    path: str
    title: str
    schema: str
    endpoint: str
    job: bool
    upload: str | None = None
    exports: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    """Columns of the `plans` table, as paths into a plan (default: every scalar field)."""
    bands: tuple[tuple[str, str], ...] = ()
    """(headline row, path of its value in the answer): the rows shown with their p10-p90 band."""


TRAIN_COLUMNS = ("hardware.num_gpus", "tp", "pp", "vpp", "dp", "cp", "ep", "dp_sharding", "micro_batch_size", "recompute",
                 "tokens_per_s_per_gpu", "mfu", "step_time_s", "peak_bytes", "usd_per_million_tokens",
                 "time_to_train_days")
SERVE_COLUMNS = ("gpu", "layout", "replicas", "gpus", "capacity_requests_per_s", "goodput_per_gpu",
                 "goodput_requests_per_s", "cost_per_million_output_tokens")


ESTIMATE_BANDS = (("step time", "step_time_s"), ("tokens/s per GPU", "tokens_per_s_per_gpu"),
                  ("MFU / HFU", "mfu"), ("peak memory per GPU", "peak_bytes"))
PLAN_BANDS = (("winner tokens/s per GPU", "plans.0.tokens_per_s_per_gpu"), ("winner step time", "plans.0.step_time_s"),
              ("winner MFU", "plans.0.mfu"))

PAGES = (
    Page("train/memory", "Training memory", "TrainingRequest", "/api/train/memory", job=False,
         bands=(("peak memory per GPU", "peak_bytes"),)),
    Page("train/estimate", "Training step time", "TrainingEstimateRequest", "/api/train/estimate", job=False,
         bands=ESTIMATE_BANDS),
    Page("train/plan", "Training plan search", "TrainingSearchRequest", "/api/train/plan", job=True,
         exports=("megatron", "torchtitan", "deepspeed"), columns=TRAIN_COLUMNS, bands=PLAN_BANDS),
    Page("serve/simulate", "Serving simulation", "SimulateRequest", "/api/serve/simulate", job=True),
    Page("serve/plan", "Serving plan search", "ServePlanRequest", "/api/serve/plan", job=True,
         exports=("vllm", "sglang"), columns=SERVE_COLUMNS),
    Page("validate", "Validation", "", "/api/validate", job=True, upload="records"),
)


def templates():
    """The Jinja2 templates of the pages (meshplan/ui/templates)."""
    from fastapi.templating import Jinja2Templates

    return Jinja2Templates(directory=str(resources.files("meshplan.ui") / "templates"))


def _render(request: Request, page: Page | None) -> HTMLResponse:
    return templates().TemplateResponse(request, "page.html", {
        "page": asdict(page) if page else None, "pages": PAGES})


@router.get("/", response_class=HTMLResponse)
def index(request: Request) -> HTMLResponse:
    return _render(request, None)


def _page_route(page: Page):
    def show(request: Request) -> HTMLResponse:
        return _render(request, page)
    return show


for _page in PAGES:
    router.add_api_route(f"/{_page.path}", _page_route(_page), methods=["GET"], response_class=HTMLResponse)


STATIC = Path(str(resources.files("meshplan.ui") / "static"))


@router.get("/static/plotly.min.js")
def plotly_js():
    """plotly.js from the installed plotly package (the page then works offline)."""
    try:
        import plotly
    except ImportError:
        return PlainTextResponse("// plotly is not installed: pip install 'meshplan[viz]'", status_code=404,
                                 media_type="text/javascript")
    return FileResponse(Path(plotly.__file__).parent / "package_data" / "plotly.min.js",
                        media_type="text/javascript")


@router.get("/static/{name}")
def static(name: str):
    path = STATIC / name
    if path.parent != STATIC or not path.is_file():
        return PlainTextResponse("not found", status_code=404)
    return FileResponse(path)
