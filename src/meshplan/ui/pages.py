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
    headline: tuple[tuple[str, str], ...] = ()
    """(headline row, paths of its values in the answer, " / " between several): the report's rows
    the page writes from the answer's numbers, in the format the details use for the same field
    (one format per quantity), each with its p10-p90 band when the answer has one. A path ending
    in `.*` stands for every row named as a key of that object (validate's metrics)."""


TRAIN_COLUMNS = ("hardware.num_gpus", "tp", "pp", "vpp", "dp", "cp", "ep", "dp_sharding", "micro_batch_size", "recompute",
                 "tokens_per_s_per_gpu", "mfu", "step_time_s", "peak_bytes", "usd_per_million_tokens",
                 "time_to_train_days")
SERVE_COLUMNS = ("gpu", "layout", "replicas", "gpus", "capacity_requests_per_s", "goodput_per_gpu",
                 "goodput_requests_per_s", "cost_per_million_output_tokens")


MEMORY_HEADLINE = (("peak memory per GPU", "peak_bytes"), ("GPU memory", "gpu_memory_bytes"),
                   ("headroom", "headroom_bytes"))


def goodput_headline(at: str = "") -> tuple[tuple[str, str], ...]:
    """The goodput rows of a training headline, their values under `at` (the winner's, in a search)."""
    return (("interruptions per day", f"{at}goodput_detail.interruptions_per_day"),
            ("checkpoint interval", f"{at}goodput.checkpoint_interval_s"),
            ("effective training time", f"{at}goodput.effective_training_time_ratio"),
            ("days to train (with failures)", f"{at}goodput.days_to_train"))


ESTIMATE_HEADLINE = (("step time", "step_time_s"), ("tokens/s per GPU", "tokens_per_s_per_gpu"),
                     ("MFU / HFU", "mfu / hfu"), ("pipeline bubble (busiest stage idle, share of step)", "bubble_fraction"),
                     ("peak memory per GPU", "peak_bytes"), ("GPU memory", "memory.gpu_memory_bytes"),
                     ("headroom", "memory.headroom_bytes"), *goodput_headline())
PLAN_HEADLINE = (("winner tokens/s per GPU", "plans.0.tokens_per_s_per_gpu"), ("winner step time", "plans.0.step_time_s"),
                 ("winner MFU", "plans.0.mfu"), ("winner GPUs", "plans.0.hardware.num_gpus"),
                 *goodput_headline("plans.0."))
SIMULATE_HEADLINE = (("requests completed", "metrics.completed"), ("requests/s", "metrics.requests_per_s"),
                     ("output tokens/s", "metrics.output_tokens_per_s"),
                     ("TTFT p50 / p90", "metrics.ttft_ms.p50 / metrics.ttft_ms.p90"),
                     ("TPOT p50 / p90", "metrics.tpot_ms.p50 / metrics.tpot_ms.p90"),
                     ("E2E p50 / p90", "metrics.e2e_ms.p50 / metrics.e2e_ms.p90"),
                     ("mean KV-cache used", "metrics.mean_kv_utilization"), ("SLO attainment", "slo.attainment"))
SERVE_PLAN_HEADLINE = (("target rate", "request_rate"), ("winner capacity", "plans.0.capacity_requests_per_s"))
VALIDATE_HEADLINE = (("all", "summary"), ("by metric", "summary.by_metric.*"))

PAGES = (
    Page("train/memory", "Training memory", "TrainingRequest", "/api/train/memory", job=False,
         headline=MEMORY_HEADLINE),
    Page("train/estimate", "Training step time", "TrainingEstimateRequest", "/api/train/estimate", job=False,
         headline=ESTIMATE_HEADLINE),
    Page("train/plan", "Training plan search", "TrainingSearchRequest", "/api/train/plan", job=True,
         exports=("megatron", "torchtitan", "deepspeed"), columns=TRAIN_COLUMNS, headline=PLAN_HEADLINE),
    Page("serve/simulate", "Serving simulation", "SimulateRequest", "/api/serve/simulate", job=True,
         headline=SIMULATE_HEADLINE),
    Page("serve/plan", "Serving plan search", "ServePlanRequest", "/api/serve/plan", job=True,
         exports=("vllm", "sglang"), columns=SERVE_COLUMNS, headline=SERVE_PLAN_HEADLINE),
    Page("validate", "Validation", "", "/api/validate", job=True, upload="records", headline=VALIDATE_HEADLINE),
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
