"""Pipeline-schedule simulator: closed forms, schedule orders, in-flight peaks, p2p, no deadlock."""

from __future__ import annotations

import pytest

from meshplan.errors import UnknownNameError
from meshplan.training.pipeline.orders import KIND_NAMES, decode
from meshplan.training.pipeline.simulate import (
    SCHEDULES, ScheduleError, StageTimes, register_schedule, simulate_pipeline,
)
from meshplan.training.pipeline.schedules import in_flight_chunks


def uniform(pp: int, vpp: int = 1, f: float = 1.0, b: float = 2.0, w: float | None = None):
    """pp identical stages; f, b, w are per-chunk times."""
    wg = (w,) * vpp if w is not None else ()
    return [StageTimes(forward_s=(f,) * vpp, backward_s=(b,) * vpp, weight_grad_s=wg)
            for _ in range(pp)]


def rendered(schedule: str, pp: int, vpp: int, m: int, stage: int) -> str:
    """A stage's op order as text: 'F1 F2 B1 W1 ...' (1-based micro-batches as in the papers),
    with the chunk appended when vpp > 1 ('F1c0')."""
    nv = pp * vpp
    ops = []
    for code in SCHEDULES[schedule].orders(pp, vpp, m)[stage]:
        kind, mb, v = decode(code, nv)
        ops.append(f"{KIND_NAMES[kind]}{mb + 1}" + (f"c{v // pp}" if vpp > 1 else ""))
    return " ".join(ops)


# --- closed forms (uniform stages, no p2p) -----------------------------------------------------

@pytest.mark.parametrize("pp", [1, 2, 4, 8])
@pytest.mark.parametrize("m", [1, 3, 4, 16])
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_1f1b_and_gpipe_step_is_m_plus_pp_minus_1_slots(schedule, pp, m):
    # (m + pp - 1)(f + b) and bubble (pp - 1)/(m + pp - 1) (Narayanan et al. 2021, eq. 1)
    r = simulate_pipeline(schedule, uniform(pp, f=1.0, b=2.0), m, 0.0)
    assert r.step_time_s == (m + pp - 1) * 3.0
    assert r.bubble_fraction == pytest.approx((pp - 1) / (m + pp - 1), abs=1e-12)
    assert r.busy_s == (m * 3.0,) * pp


@pytest.mark.parametrize("pp", [2, 4])
@pytest.mark.parametrize("vpp", [2, 3, 4])
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_interleaved_shrinks_the_bubble_by_vpp(pp, vpp, groups):
    # chunks of f/vpp and b/vpp: step = (m + (pp - 1)/vpp)(f + b) (Narayanan et al. 2021, eq. 2)
    m, f, b = groups * pp, 1.0, 2.0
    r = simulate_pipeline("interleaved", uniform(pp, vpp, f / vpp, b / vpp), m, 0.0)
    assert r.step_time_s == pytest.approx((m + (pp - 1) / vpp) * (f + b), rel=1e-12)
    assert r.bubble_fraction == pytest.approx((pp - 1) / (m * vpp + pp - 1), rel=1e-9)


@pytest.mark.parametrize("pp", [2, 4, 8])
@pytest.mark.parametrize("times", [(1.0, 1.0, 1.0), (1.0, 1.25, 0.75), (1.0, 1.5, 0.5)])
def test_zero_bubble_h1_bubble_is_pp_minus_1_times_f_plus_b_minus_w(pp, times):
    # ZB-H1 (Qi et al. 2023, Table 2): bubble (p - 1)(TF + TB - TW), B = input-grad part,
    # for m >= p and TW <= TB (the paper's setting); 1F1B's is (p - 1)(TF + TB + TW).
    f, b_in, w = times
    for m in (pp, 2 * pp, 4 * pp):
        r = simulate_pipeline("zero-bubble", uniform(pp, 1, f, b_in + w, w), m, 0.0)
        assert r.step_time_s == pytest.approx(m * (f + b_in + w) + (pp - 1) * (f + b_in - w))
        one_f_one_b = simulate_pipeline("1f1b", uniform(pp, 1, f, b_in + w), m, 0.0)
        assert one_f_one_b.step_time_s - r.step_time_s == pytest.approx(2 * (pp - 1) * w)


def test_zero_bubble_h1_with_weight_grad_longer_than_input_grad():
    # TW > TB: the deferred W's no longer shorten the critical path below (p - 1) TF
    pp, m, f, b_in, w = 4, 8, 1.0, 0.75, 1.25
    r = simulate_pipeline("zero-bubble", uniform(pp, 1, f, b_in + w, w), m, 0.0)
    assert r.step_time_s == pytest.approx(m * (f + b_in + w) + (pp - 1) * f)


def test_zero_bubble_default_weight_grad_is_half_the_backward():
    given = simulate_pipeline("zero-bubble", uniform(4, 1, 1.0, 2.0, 1.0), 8, 0.0)
    default = simulate_pipeline("zero-bubble", uniform(4, 1, 1.0, 2.0), 8, 0.0)
    assert default.step_time_s == given.step_time_s == 8 * 3.0 + 3 * 1.0


# --- orders as the engines and papers have them ------------------------------------------------

def test_1f1b_order_is_pipedream_flush():
    assert rendered("1f1b", 4, 1, 6, 0) == "F1 F2 F3 F4 B1 F5 B2 F6 B3 B4 B5 B6"
    assert rendered("1f1b", 4, 1, 6, 3) == "F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6"
    assert rendered("1f1b", 4, 1, 2, 0) == "F1 F2 B1 B2"


def test_gpipe_runs_backwards_in_microbatch_order():
    # torch.distributed.pipelining.ScheduleGPipe: all forwards, then backwards 0..m-1
    assert rendered("gpipe", 2, 1, 3, 1) == "F1 F2 F3 B1 B2 B3"
    assert rendered("gpipe", 2, 2, 2, 0) == "F1c0 F2c0 F1c1 F2c1 B1c1 B2c1 B1c0 B2c0"


def test_interleaved_order_is_megatrons():
    # pp=2, vpp=2, m=4: groups of pp micro-batches per chunk; stage 0 warms up with
    # 2 (pp - 1) + (vpp - 1) pp = 4 forwards, stage 1 with 2; backwards walk the chunks in reverse
    assert rendered("interleaved", 2, 2, 4, 0) == (
        "F1c0 F2c0 F1c1 F2c1 F3c0 B1c1 F4c0 B2c1 F3c1 B1c0 F4c1 B2c0 B3c1 B4c1 B3c0 B4c0")
    assert rendered("interleaved", 2, 2, 4, 1) == (
        "F1c0 F2c0 F1c1 B1c1 F2c1 B2c1 F3c0 B1c0 F4c0 B2c0 F3c1 B3c1 F4c1 B4c1 B3c0 B4c0")


def test_zero_bubble_order_is_zb_h1_figure():
    # Qi et al. 2023, Figure 3 (top), p=4, m=8: stage s runs W of micro-batch i after B of i + s
    assert rendered("zero-bubble", 4, 1, 8, 0) == (
        "F1 F2 F3 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 F8 B5 W5 B6 W6 B7 W7 B8 W8")
    assert rendered("zero-bubble", 4, 1, 8, 1) == (
        "F1 F2 F3 B1 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 F8 B6 W5 B7 W6 B8 W7 W8")
    assert rendered("zero-bubble", 4, 1, 8, 3) == (
        "F1 B1 F2 B2 F3 B3 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 F8 B8 W5 W6 W7 W8")


# --- in-flight activations ----------------------------------------------------------------------

@pytest.mark.parametrize("pp", [1, 2, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 4, 16])
def test_peak_in_flight_closed_forms(pp, m):
    assert simulate_pipeline("1f1b", uniform(pp), m, 0.0).peak_in_flight == tuple(
        min(pp - s, m) for s in range(pp))
    assert simulate_pipeline("zero-bubble", uniform(pp), m, 0.0).peak_in_flight == tuple(
        min(pp - s, m) for s in range(pp))
    assert simulate_pipeline("gpipe", uniform(pp), m, 0.0).peak_in_flight == (m,) * pp
    for vpp in (2, 3):
        if m % pp == 0:
            r = simulate_pipeline("interleaved", uniform(pp, vpp), m, 0.0)
            assert r.peak_in_flight[0] == min(2 * (pp - 1) + (vpp - 1) * pp + 1, m * vpp)


def test_gpipe_with_chunks_keeps_every_chunk_activation():
    # every (micro-batch, chunk) forward finishes before the first backward: m * vpp
    assert simulate_pipeline("gpipe", uniform(2, 3), 4, 0.0).peak_in_flight == (12, 12)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zero-bubble", "interleaved"])
def test_peak_in_flight_agrees_with_the_memory_model(schedule):
    # meshplan.training.pipeline.schedules (memory) counts the same model-chunk activations per
    # stage
    for pp in (1, 2, 3, 4, 8):
        for vpp in ((2, 3) if schedule == "interleaved" else (1,)):
            for m in (1, 2, 4, 8, 16):
                if schedule == "interleaved" and m % pp:
                    continue
                r = simulate_pipeline(schedule, uniform(pp, vpp), m, 0.0, with_events=False)
                assert r.peak_in_flight == tuple(
                    in_flight_chunks(schedule, s, pp, vpp, m) for s in range(pp))


# --- p2p and uneven stages (hand-computed) ------------------------------------------------------

def test_p2p_adds_one_send_each_way_on_two_stages():
    # 1F1B, pp=2, m=2, f=1, b=2, p2p=0.5. Stage 0: F1 F2 B1 B2; stage 1: F1 B1 F2 B2.
    # s0 F1 0-1, F2 1-2; s1 F1 1.5-2.5, B1 2.5-4.5, F2 4.5-5.5 (F2 arrived 2.5), B2 5.5-7.5;
    # s0 B1 5-7 (grad arrives 4.5 + 0.5), B2 8-10 (7.5 + 0.5). Without p2p: (2 + 1) * 3 = 9.
    stages = uniform(2, f=1.0, b=2.0)
    assert simulate_pipeline("1f1b", stages, 2, 0.0).step_time_s == 9.0
    r = simulate_pipeline("1f1b", stages, 2, 0.5)
    assert r.step_time_s == 10.0
    timeline = {(e.stage, e.kind, e.microbatch): (e.start_s, e.end_s) for e in r.events}
    assert timeline[(1, "F", 0)] == (1.5, 2.5)
    assert timeline[(1, "F", 1)] == (4.5, 5.5)
    assert timeline[(0, "B", 0)] == (5.0, 7.0)
    assert timeline[(0, "B", 1)] == (8.0, 10.0)
    assert timeline[(0, "send", 0)] == (1.0, 1.5)  # activation of micro-batch 0 to stage 1


def test_slower_last_stage_sets_the_pace():
    # LM head: stage 1 takes twice as long. 1F1B, m=2: s0 F1 0-1 F2 1-2; s1 F1 1-3 B1 3-7
    # F2 7-9 B2 9-13; s0 B1 7-9, B2 13-15. 15 = s0's F1 + all of s1's work (12) + s0's B2.
    stages = [StageTimes(forward_s=(1.0,), backward_s=(2.0,)),
              StageTimes(forward_s=(2.0,), backward_s=(4.0,))]
    r = simulate_pipeline("1f1b", stages, 2, 0.0)
    assert r.step_time_s == 15.0
    assert r.busy_s == (6.0, 12.0)
    assert r.bubble_fraction == pytest.approx(1 - 9.0 / 15.0)
    assert r.step_time_s >= max(r.busy_s)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zero-bubble", "interleaved"])
def test_step_is_bounded_by_slowest_stage_and_critical_path(schedule):
    vpp = 2 if schedule == "interleaved" else 1
    stages = [StageTimes(forward_s=(1.0 + 0.3 * s,) * vpp, backward_s=(2.0 + 0.1 * s,) * vpp)
              for s in range(4)]
    stages[-1] = StageTimes(forward_s=(2.5,) * vpp, backward_s=(4.5,) * vpp)  # LM head + loss
    p2p = 0.05
    r = simulate_pipeline(schedule, stages, 8, p2p)
    one_microbatch = sum(sum(st.forward_s) + sum(st.backward_s) for st in stages)
    assert r.step_time_s >= max(r.busy_s)
    assert r.step_time_s >= one_microbatch + 2 * (4 * vpp - 1) * p2p


# --- every schedule runs to completion with consistent events ---------------------------------

def _check_events(r, pp: int, vpp: int, m: int, p2p: float, split: bool) -> None:
    nv = pp * vpp
    ops = {}
    for e in r.events:
        if e.kind in KIND_NAMES:
            v = e.chunk * pp + e.stage
            assert (e.kind, e.microbatch, v) not in ops
            ops[(e.kind, e.microbatch, v)] = e
    kinds = "FBW" if split else "FB"
    assert len(ops) == len(kinds) * m * nv
    sends = 2 * m * (nv - 1) if pp > 1 else 0
    assert len(r.events) == len(ops) + sends
    hop = p2p if pp > 1 else 0.0
    eps = 1e-9
    for (kind, mb, v), e in ops.items():
        if kind == "F" and v > 0:
            assert e.start_s >= ops["F", mb, v - 1].end_s + hop - eps
        if kind == "B":
            assert e.start_s >= ops["F", mb, v].end_s - eps
            if v < nv - 1:
                assert e.start_s >= ops["B", mb, v + 1].end_s + hop - eps
        if kind == "W":
            assert e.start_s >= ops["B", mb, v].end_s - eps
    for s in range(pp):
        spans = sorted((e.start_s, e.end_s) for e in ops.values() if e.stage == s)
        assert all(a[1] <= b[0] + eps for a, b in zip(spans, spans[1:]))  # one op at a time
    assert max(e.end_s for e in ops.values()) == pytest.approx(r.step_time_s)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zero-bubble", "interleaved"])
def test_no_deadlock_over_the_grid(schedule):
    for pp in (1, 2, 3, 4, 8):
        for vpp in (1, 2, 3):
            for m in (1, 2, 4, 8, 16):
                valid = {"gpipe": True, "1f1b": vpp == 1, "zero-bubble": vpp == 1,
                         "interleaved": vpp > 1 and m % pp == 0}[schedule]
                stages = [StageTimes(forward_s=tuple(1.0 + 0.1 * ((s + c) % 3) for c in range(vpp)),
                                     backward_s=tuple(2.0 + 0.2 * (s % 2) for _ in range(vpp)))
                          for s in range(pp)]
                if not valid:
                    with pytest.raises(ScheduleError):
                        simulate_pipeline(schedule, stages, m, 0.1)
                    continue
                r = simulate_pipeline(schedule, stages, m, 0.1)
                _check_events(r, pp, vpp, m, 0.1, SCHEDULES[schedule].split_backward)
                bare = simulate_pipeline(schedule, stages, m, 0.1, with_events=False)
                assert bare.events == ()
                assert bare.step_time_s == r.step_time_s
                assert bare.peak_in_flight == r.peak_in_flight


# --- registry and errors -------------------------------------------------------------------------

def test_one_decorator_adds_a_schedule():
    @register_schedule("test-gpipe-reversed")
    def reversed_backwards(pp, vpp, m):
        return [[mb * pp * 3 + s * 3 for mb in range(m)]
                + [mb * pp * 3 + s * 3 + 1 for mb in reversed(range(m))] for s in range(pp)]

    try:
        r = simulate_pipeline("test-gpipe-reversed", uniform(3), 4, 0.0)
        assert r.step_time_s == simulate_pipeline("gpipe", uniform(3), 4, 0.0).step_time_s
    finally:
        del SCHEDULES["test-gpipe-reversed"]


def test_an_order_that_deadlocks_is_reported():
    @register_schedule("test-backward-first")
    def backward_first(pp, vpp, m):
        return [[s * 3 + 1, s * 3] for s in range(pp)]  # B before its own forward

    try:
        with pytest.raises(RuntimeError, match="deadlocks"):
            simulate_pipeline("test-backward-first", uniform(2), 1, 0.0)
    finally:
        del SCHEDULES["test-backward-first"]


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="divisible by pp=4"):
        simulate_pipeline("interleaved", uniform(4, 2), 6, 0.0)
    with pytest.raises(ValueError, match="vpp >= 2"):
        simulate_pipeline("interleaved", uniform(4, 1), 8, 0.0)
    with pytest.raises(ValueError, match="one model chunk"):
        simulate_pipeline("1f1b", uniform(4, 2), 8, 0.0)
    with pytest.raises(ValueError, match="num_microbatches"):
        simulate_pipeline("1f1b", uniform(2), 0, 0.0)
    with pytest.raises(ValueError, match="p2p_s"):
        simulate_pipeline("1f1b", uniform(2), 2, -1.0)
    with pytest.raises(ValueError, match="same number of chunks"):
        simulate_pipeline("gpipe", uniform(1, 1) + uniform(1, 2), 2, 0.0)
    with pytest.raises(ValueError, match="at least one"):
        simulate_pipeline("gpipe", [], 2, 0.0)
    with pytest.raises(UnknownNameError, match="1f1b"):
        simulate_pipeline("1fb1", uniform(2), 2, 0.0)
    with pytest.raises(ValueError, match="per chunk"):
        StageTimes(forward_s=(1.0, 1.0), backward_s=(2.0,))
    with pytest.raises(ValueError, match=">= 0"):
        StageTimes(forward_s=(-1.0,), backward_s=(2.0,))
    with pytest.raises(ValueError, match="exceeds"):
        StageTimes(forward_s=(1.0,), backward_s=(2.0,), weight_grad_s=(3.0,))


def test_schedules_declaring_own_ends_start_and_end_each_stage_on_its_own_chunk():
    """`Schedule.own_ends` lets the step-time lower bound skip building the orders: for every
    shape, each stage's first op must be a forward and its last a backward of its own first
    chunk, as reading the built orders says."""
    from meshplan.training.pipeline.orders import B, F, SCHEDULES, cached_orders

    declared = [name for name, spec in SCHEDULES.items() if spec.own_ends]
    assert set(declared) >= {"1f1b", "gpipe", "interleaved"} and "zero-bubble" not in declared
    for name in declared:
        for pp in (1, 2, 3, 4, 8):
            for vpp in ((1,) if name == "1f1b" else (1, 2, 3) if name == "gpipe" else (2, 3, 4)):
                if name == "interleaved" and pp == 1:
                    continue
                for m in ((pp, 2 * pp, 5 * pp) if name == "interleaved" else (1, 2, pp, 3 * pp + 1)):
                    for s, order in enumerate(cached_orders(name, pp, vpp, m)):
                        first, last = decode(order[0], pp * vpp), decode(order[-1], pp * vpp)
                        assert (first[0], first[2], last[0], last[2]) == (F, s, B, s), (name, pp, vpp, m, s)
