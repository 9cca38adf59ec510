"""Write the packaged length tables of the named public datasets (serving/data/*_lengths.yaml)
from the published statistics and stated assumptions below; no dataset is downloaded.

    python scripts/derive_length_tables.py            # rewrite openorca, cnn_dailymail, longbench

Two constructions, both ending in the quantile-table format of sharegpt_lengths.yaml (cumulative
probabilities, prompt and output tokens at each, a Spearman rank correlation for the copula):
- `truncated`: each side a lognormal of the stated sigma truncated to [min, max], its median
  solved so that the table's implied mean (trapezoid rule over the probabilities, the mean the
  sampler reproduces) equals the published mean.
- `mixture`: a benchmark of tasks, each task's prompts a lognormal around its published mean
  and its output its published generation length, tasks weighted by their sample counts; the
  table holds the mixture's quantiles and the Spearman correlation of a seeded sample of it.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
from scipy import optimize, stats

DATA = Path(__file__).resolve().parents[1] / "src" / "meshplan" / "serving" / "data"
PROBS = [0.0, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70,
         0.75, 0.80, 0.85, 0.90, 0.95, 0.99, 1.0]
TOKENS_PER_WORD = 1.3
"""Assumption: BPE tokens (GPT-2 / Llama tokenizers) per whitespace-separated English word."""


def table_mean(values: list[float], probs: list[float] = PROBS) -> float:
    p = np.asarray(probs)
    v = np.asarray(values, dtype=float)
    return float(np.sum(np.diff(p) * (v[1:] + v[:-1]) / 2))


def lognormal_table(median: float, sigma: float, lo: int, hi: int, probs: list[float] = PROBS,
                    rounded: bool = True) -> list:
    """Quantiles at `probs` of a lognormal(median, sigma) truncated to [lo, hi]."""
    dist = stats.lognorm(sigma, scale=median)
    f_lo, f_hi = dist.cdf(lo), dist.cdf(hi)
    inner = [min(max(float(dist.ppf(f_lo + p * (f_hi - f_lo))), lo), hi) for p in probs[1:-1]]
    return [lo, *(int(round(v)) if rounded else v for v in inner), hi]


def solve_median(mean: float, sigma: float, lo: int, hi: int, probs: list[float] = PROBS) -> float:
    """The median whose truncated table (unrounded) has the implied mean `mean`."""
    return optimize.brentq(lambda m: table_mean(lognormal_table(m, sigma, lo, hi, probs, False), probs) - mean,
                           lo * 0.5, hi * 2.0, xtol=1e-3)


def truncated_quantiles(mean: float, sigma: float, lo: int, hi: int,
                        probs: list[float] = PROBS) -> tuple[list[int], float]:
    """Rounded quantiles of a lognormal(sigma) truncated to [lo, hi] with the table mean `mean`."""
    def table(median: float) -> list[int]:
        return lognormal_table(median, sigma, lo, hi, probs)

    median = optimize.brentq(lambda m: table_mean(table(m), probs) - mean, lo * 0.5, hi * 2.0, xtol=1e-3)
    return table(median), median


def mixture_quantiles(tasks: list[dict], sigma: float) -> tuple[list[int], list[int], float, float, float]:
    """(input quantiles, output quantiles, spearman, mean input, mean output) of a task mixture."""
    weights = np.array([t["samples"] for t in tasks], dtype=float)
    weights /= weights.sum()
    means = np.array([t["words"] * TOKENS_PER_WORD for t in tasks])
    mus = np.log(means) - sigma**2 / 2  # each task's lognormal has the task's mean

    def cdf(x: float) -> float:
        return float(np.sum(weights * stats.norm.cdf((math.log(x) - mus) / sigma)))

    inner = [int(round(optimize.brentq(lambda x: cdf(x) - p, 1.0, 1e7))) for p in PROBS[1:-1]]
    lo = int(round(float(np.min(np.exp(mus - 3 * sigma)))))
    hi = int(round(float(np.max(np.exp(mus + 3 * sigma)))))
    inputs = [lo, *inner, hi]
    outs = np.array([t["max_new_tokens"] for t in tasks])
    order = np.argsort(outs, kind="stable")
    cum = np.cumsum(weights[order])
    outputs = [int(outs[order][min(np.searchsorted(cum, p - 1e-12), len(cum) - 1)]) for p in PROBS]
    rng = np.random.default_rng(20240101)
    pick = rng.choice(len(tasks), size=200_000, p=weights)
    x = rng.lognormal(mus[pick], sigma)
    rho = float(stats.spearmanr(x, outs[pick]).statistic)
    return inputs, outputs, rho, float(np.sum(weights * means)), float(np.sum(weights * outs))


def _yaml_list(values) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def write(name: str, header: str, tokenizer: str, inp: dict, out: dict, spearman: dict, extra: str = "",
          probs: tuple[list[float], str] = (PROBS, "choice: every 5% plus p99, as sharegpt_lengths.yaml")) -> None:
    wrapped = [w for line in header.strip().splitlines() for w in textwrap.wrap(line, 96) or [""]]
    lines = [*(f"# {line}".rstrip() for line in wrapped),
             "# Written by scripts/derive_length_tables.py; edit the script, not this file.",
             "schema: 1", f"name: {name}", f"tokenizer: {{value: {tokenizer!r}}}",
             "probs:", f"  values: {_yaml_list(probs[0])}", f"  source: {json.dumps(probs[1])}"]
    for side, d in (("input_tokens", inp), ("output_tokens", out)):
        lines += [f"{side}:", "  quantiles:", f"    values: {_yaml_list(d['quantiles'])}",
                  f"    source: {d['how']!r}"]
        lines += [f"  {k}: {{value: {v[0]}, source: {v[1]!r}}}" for k, v in d["facts"].items()]
    lines.append(f"spearman: {{value: {spearman['value']}, source: {spearman['source']!r}}}")
    (DATA / f"{name}_lengths.yaml").write_text("\n".join(lines) + "\n" + extra)


def openorca() -> None:
    mean_in, mean_out = 222.0, round(31106.28 / 106.21, 1)
    q_in, med_in = truncated_quantiles(mean_in, 0.9, 10, 1023)
    q_out, med_out = truncated_quantiles(mean_out, 0.8, 3, 1024)
    write("openorca", """
OpenOrca (GPT-4 augmented subset) as MLPerf Inference's Llama 2 70B benchmark samples it:
24,576 English prompts under the Llama 2 chat template, tokenized with the Llama 2 tokenizer.
Dataset: https://huggingface.co/datasets/Open-Orca/OpenOrca; sampling and filters:
mlcommons/inference language/llama2-70b/processorca.py (prompt < 1024 tokens, reference answer
3..1023 tokens, equal shares of the cot/flan/niv/t0 origins).
DERIVED, NOT MEASURED: truncated lognormal marginals (method `truncated` of the script).""",
          "Llama 2 (LlamaTokenizerFast, MLPerf llama2-70b preprocessing)",
          {"quantiles": q_in, "how": f"derived: lognormal sigma 0.9 truncated to [10, 1023], median {med_in:.1f} "
                                      f"solved so the table mean is {mean_in}",
           "facts": {"mean": (mean_in, "issue #32's description of the OpenOrca prompts its measurement set used "
                                       "(mean 222 tokens, a long tail to about 1k); not re-derived from a public page"),
                     "sigma": (0.9, "assumption: most prompts are short instructions, a few carry a passage"),
                     "min": (10, "assumption: the Llama 2 chat template alone is about ten tokens"),
                     "max": (1023, "processorca.py keeps prompts with fewer than 1024 tokens")}},
          {"quantiles": q_out, "how": f"derived: lognormal sigma 0.8 truncated to [3, 1024], median {med_out:.1f} "
                                       f"solved so the table mean is {mean_out}",
           "facts": {"mean": (mean_out, "MLPerf Inference v5.0 result 5.0-0057 (NVIDIA DGX H100, llama2-70b-99 "
                                        "Server): 31,106.28 tokens/s / 106.21 samples/s = 292.9 generated tokens "
                                        "per sample"),
                     "sigma": (0.8, "assumption: step-by-step answers spread about as widely as ShareGPT's"),
                     "min": (3, "processorca.py drops reference answers under 3 tokens"),
                     "max": (1024, "MLPerf llama2-70b generates at most 1024 new tokens")}},
          {"value": 0.1, "source": "assumption: weak positive rank correlation, as for ShareGPT; no published figure"})


def cnn_dailymail() -> None:
    mean_in, mean_out = round(781 * TOKENS_PER_WORD, 1), round(56 * TOKENS_PER_WORD, 1)
    q_in, med_in = truncated_quantiles(mean_in, 0.5, 100, 2048)
    q_out, med_out = truncated_quantiles(mean_out, 0.35, 30, 128)
    words = "https://huggingface.co/datasets/abisee/cnn_dailymail (dataset card, 'mean token count')"
    write("cnn_dailymail", """
CNN/DailyMail 3.0.0 news summarization (article -> highlights), as MLPerf Inference's GPT-J
benchmark serves it. Dataset: https://huggingface.co/datasets/abisee/cnn_dailymail.
DERIVED, NOT MEASURED: the dataset card publishes mean word counts (article 781, highlights 56,
as See et al., ACL 2017, Table 1); they are converted to BPE tokens at 1.3 tokens per word and
each side is a truncated lognormal (method `truncated` of the script).""",
          "GPT-2 / GPT-J BPE (word counts x 1.3)",
          {"quantiles": q_in, "how": f"derived: lognormal sigma 0.5 truncated to [100, 2048], median {med_in:.1f} "
                                      f"solved so the table mean is {mean_in}",
           "facts": {"mean": (mean_in, f"{words}: article 781 words x 1.3 tokens/word"),
                     "sigma": (0.5, "assumption: news articles spread moderately around their mean"),
                     "min": (100, "assumption: the shortest articles are a few paragraphs"),
                     "max": (2048, "assumption: GPT-J's 2048-token context bounds a served prompt")}},
          {"quantiles": q_out, "how": f"derived: lognormal sigma 0.35 truncated to [30, 128], median {med_out:.1f} "
                                       f"solved so the table mean is {mean_out}",
           "facts": {"mean": (mean_out, f"{words}: highlights 56 words x 1.3 tokens/word"),
                     "sigma": (0.35, "assumption: highlights are 3-4 sentences, a narrow spread"),
                     "min": (30, "MLPerf GPT-J reference generation: min_new_tokens 30"),
                     "max": (128, "MLPerf GPT-J reference generation: max_new_tokens 128")}},
          {"value": 0.3, "source": "assumption: longer articles get somewhat longer highlights; no published figure"})


LONGBENCH_TASKS = [  # name, average words (task.md), samples (task.md), max_new_tokens (dataset2maxlen.json)
    ("hotpotqa", 9151, 200, 32), ("2wikimqa", 4887, 200, 32), ("musique", 11214, 200, 32),
    ("multifieldqa_en", 4559, 150, 64), ("narrativeqa", 18409, 200, 128), ("qasper", 3619, 200, 128),
    ("gov_report", 8734, 200, 512), ("qmsum", 10614, 200, 512), ("multi_news", 2113, 200, 512),
    ("triviaqa", 8209, 200, 32), ("samsum", 6258, 200, 128), ("trec", 5177, 200, 64),
    ("passage_retrieval_en", 9289, 200, 32), ("passage_count", 11141, 200, 32), ("lcc", 1235, 500, 64),
    ("repobench-p", 4206, 500, 64)]


def longbench() -> None:
    tasks = [{"name": n, "words": w, "samples": s, "max_new_tokens": m} for n, w, s, m in LONGBENCH_TASKS]
    q_in, q_out, rho, mean_in, mean_out = mixture_quantiles(tasks, 0.35)
    task_list = "; ".join(f"{n} {w} words x{s}, {m} out" for n, w, s, m in LONGBENCH_TASKS)
    write("longbench", f"""
LongBench (v1), the 16 English and code tasks (4,750 prompts less the 5 Chinese tasks), a
long-context set. Dataset: https://huggingface.co/datasets/THUDM/LongBench.
Per task: average length in words (Python split) and sample count from THUDM/LongBench
LongBench/task.md; generation length max_new_tokens from LongBench/config/dataset2maxlen.json.
DERIVED, NOT MEASURED (method `mixture` of the script): each task's prompts a lognormal with
sigma 0.35 (assumption) around its average x 1.3 tokens/word (assumption), outputs exactly
the task's max_new_tokens (a serving benchmark that ignores EOS generates that many), tasks
weighted by sample count. Tasks: {task_list}.""",
          "Llama-style BPE (word counts x 1.3)",
          {"quantiles": q_in, "how": "derived: quantiles of the task mixture (see the header)",
           "facts": {"mean": (round(mean_in, 1), "derived: sample-weighted mean of the task averages x 1.3")}},
          {"quantiles": q_out, "how": "derived: sample-weighted distribution of the tasks' max_new_tokens",
           "facts": {"mean": (round(mean_out, 1), "derived: sample-weighted mean of max_new_tokens")}},
          {"value": round(rho, 2), "source": "derived: Spearman correlation of 200,000 seeded draws of the mixture"})


VLLM_FILE = "vllm-project/vllm@f2e97ddaf5902a9727f48b70d001b6117b8b8b12 vllm/benchmarks/datasets.py"
SGLANG_FILE = "sgl-project/sglang@0033168f0f58b2bc05aa0273bd475d9c01bafb1c python/sglang/bench_serving.py"
GPUSTACK = "gpustack/gpustack@{} docs/performance-lab/{}, '1. Choosing the Inference Engine', vLLM block"
COOKBOOK = "sgl-project/sgl-cookbook@{} docs/autoregressive/{}, '5. Benchmark' Test Results block"
VLLM_RUNS = [  # tokenizer (the served model's), tool, prompts, total input, total generated, source
    ("Qwen/Qwen3-32B", "vllm bench serve, vLLM v0.11.0", 1000, 217_393, 201_422,
     GPUSTACK.format("10e9444a07c73556f2ef0d10d2b2766bbf54c9c0", "qwen3-32b/h100.md")),
    ("openai/gpt-oss-120b", "vllm bench serve, vLLM v0.10.2", 1000, 215_312, 195_544,
     GPUSTACK.format("72aee9dd195ff5c9bf3a4886add80038ce79aef8", "gpt-oss-120b/h100.md")),
    ("deepseek-ai/DeepSeek-R1-0528", "vllm bench serve, vLLM v0.11.0", 1000, 219_171, 200_752,
     GPUSTACK.format("a5c9fafc3022e81779c2c5ade32c5b703ce2248c", "deepseek-r1/h200.md"))]
"""`vllm bench serve --backend openai-chat --dataset-name sharegpt --num-prompts 1000` (seed 0,
EOS not ignored), ShareGPT_V3_unfiltered_cleaned_split.json."""
VLLM_CROSS_CHECK = ("meta-llama/Llama-3.1-8B-Instruct", "vllm bench serve (vLLM PR #18566, May 2025)", 1000,
                    229_711, 203_068, "https://github.com/vllm-project/vllm/pull/18566 (description: "
                    "--dataset-name hf --dataset-path Aeala/ShareGPT_Vicuna_unfiltered)")
SGLANG_RUNS = [
    ("openai/gpt-oss-120b", "sglang.bench_serving, sglang 0.5.6", 1000, 297_156, 192_432,
     COOKBOOK.format("1b354da54be64e2445cc4d9a1f8146627af4f996", "OpenAI/GPT-OSS.md (5.1.2)")),
    ("moonshotai/Kimi-K2-Instruct", "sglang.bench_serving, sglang 0.5.6.post1", 1000, 296_642, 193_831,
     COOKBOOK.format("0abf8552ac51e2c7457b755be255eebf3f8d4d50", "Moonshotai/Kimi-K2.md (concurrency 100)")),
    ("deepseek-ai/DeepSeek-V3", "sglang.bench_serving, sglang 0.5.7", 1000, 301_701, 188_375,
     COOKBOOK.format("36c07b430a0c3523ba787d7c03012f58984a7f66", "DeepSeek/DeepSeek-V3.md (5.1.2, MI300X)"))]
"""`python -m sglang.bench_serving --backend sglang --num-prompts 1000`, the default ShareGPT
(seed 1, EOS ignored: each output is the dataset answer's length)."""
SHAREGPT_SPEARMAN = {"value": 0.1, "source": "assumption, as sharegpt_lengths.yaml: no published figure"}
TAIL_PROBS = [*PROBS[:-1], 0.995, 0.999, 1.0]
SGLANG_PROMPT_MAX = 16_384
SGLANG_ANSWER_MAX = 4_096
VLLM_MAX_TOTAL = 2_048


def pooled_means(runs) -> tuple[float, float]:
    """Tokens per request over all the runs' prompts: (input, output)."""
    prompts = sum(r[2] for r in runs)
    return sum(r[3] for r in runs) / prompts, sum(r[4] for r in runs) / prompts


def shared_prompt_sigma(vllm_mean: float, sglang_mean: float) -> float:
    """Sigma of one lognormal of ShareGPT first-turn prompts that gives vLLM's mean when truncated
    to its [4, 1024] and SGLang's when truncated to [2, SGLANG_PROMPT_MAX]: the two samplers draw
    from the same conversations, so their two means fix the spread."""
    def gap(sigma: float) -> float:
        median = solve_median(vllm_mean, sigma, 4, 1024)
        wide = lognormal_table(median, sigma, 2, SGLANG_PROMPT_MAX, TAIL_PROBS, False)
        return table_mean(wide, TAIL_PROBS) - sglang_mean
    return optimize.brentq(gap, 0.5, 2.5, xtol=1e-4)


def filtered_means(q_in: list[int], q_out: list[int], max_total: int) -> tuple[float, float]:
    """Mean input and output of 400,000 seeded draws of the table with pairs over max_total redrawn,
    as meshplan's sampler draws them."""
    from meshplan.serving.traffic.lengths import EmpiricalLengths, pair_limited

    table = EmpiricalLengths(probs=np.array(PROBS), input_quantiles=np.array(q_in, dtype=float),
                             output_quantiles=np.array(q_out, dtype=float), spearman=SHAREGPT_SPEARMAN["value"])
    ins, outs = pair_limited(table.draw, max_total, q_in[0] + q_out[0], "sharegpt_vllm")(
        400_000, np.random.default_rng(20260101))
    return float(ins.mean()), float(outs.mean())


def vllm_tables(mean_in: float, mean_out: float, sigma_in: float) -> tuple[list[int], list[int], float, float]:
    """Tables whose draws, after the pair filter, have the measured means (three fixed-point rounds)."""
    aim_in, aim_out = mean_in, mean_out
    for _ in range(3):
        q_in = lognormal_table(solve_median(aim_in, sigma_in, 4, 1024), sigma_in, 4, 1024)
        q_out = lognormal_table(solve_median(aim_out, 0.75, 4, VLLM_MAX_TOTAL - 4), 0.75, 4, VLLM_MAX_TOTAL - 4)
        got_in, got_out = filtered_means(q_in, q_out, VLLM_MAX_TOTAL)
        aim_in, aim_out = aim_in * mean_in / got_in, aim_out * mean_out / got_out
    return q_in, q_out, aim_in, aim_out


def _paragraphs(text: str) -> str:
    """Blank-line separated paragraphs as one line each, so `write` wraps them evenly."""
    return "\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


def _runs_yaml(runs, eos: str) -> str:
    rows = [f"  - {{tokenizer: {r[0]!r}, tool: {r[1]!r}, num_prompts: {r[2]}, total_input_tokens: {r[3]}, "
            f"total_output_tokens: {r[4]}, eos: {eos!r}, source: {r[5]!r}}}" for r in runs]
    return "measured_runs:\n" + "\n".join(rows) + "\n"


def sharegpt_vllm() -> None:
    mean_in, mean_out = pooled_means(VLLM_RUNS)
    sigma = shared_prompt_sigma(mean_in, pooled_means(SGLANG_RUNS)[0])
    q_in, q_out, aim_in, aim_out = vllm_tables(mean_in, mean_out, sigma)
    runs = "; ".join(f"{r[0]}: {r[3]:,} / {r[4]:,}" for r in VLLM_RUNS)
    check = VLLM_CROSS_CHECK
    write("sharegpt_vllm", _paragraphs(f"""
ShareGPT as `vllm bench serve --dataset-name sharegpt` samples it (ShareGPTDataset, {VLLM_FILE}):
conversations with two or more turns, shuffled with --seed (default 0), the first human turn as
the prompt and the first answer's token count (the served model's tokenizer) as the requested
output; pairs kept only with prompt and answer >= 4 tokens, prompt <= 1024 and prompt + answer
<= 2048. EOS is honoured unless --ignore-eos (vllm/benchmarks/serve.py), so generated tokens are
at most the requested ones; the reasoning models of the runs below nearly always reach them (on the
Qwen3-32B page vLLM, SGLang and TensorRT-LLM servers generated 201,422, 201,826 and 201,723 tokens
for the same 1000 requests).

MEASURED MEANS, DERIVED SHAPE: the means are the pooled totals of three published 1000-prompt
runs (total input / generated tokens: {runs}), the same seed-0 draw under three tokenizers; cross-check: {check[0]} {check[3]:,} / {check[4]:,} ({check[5]}).

Prompt side: a lognormal truncated to [4, 1024] whose sigma ({sigma:.3f}) is solved together with
sharegpt_sglang's so that one distribution of first-turn prompts gives both samplers' measured
means. Answer side: a lognormal, sigma 0.75 (sharegpt_lengths.yaml's assumption), truncated to
[4, 2044]. Medians are solved so that the sampler's draws, after max_total_tokens redraws, have
the measured means."""),
          "the served model's (Qwen3, gpt-oss o200k, DeepSeek-V3 BPE in the measured runs)",
          {"quantiles": q_in, "how": f"derived: lognormal sigma {sigma:.3f} truncated to [4, 1024], table mean "
                                      f"{aim_in:.1f} so that pair-filtered draws average {mean_in:.1f}",
           "facts": {"mean": (round(mean_in, 1), f"pooled measured runs (measured_runs below): {runs}"),
                     "sigma": (round(sigma, 3), "derived: solved with sharegpt_sglang's prompt side (header)"),
                     "min": (4, f"{VLLM_FILE}: is_valid_sequence min_len 4"),
                     "max": (1024, f"{VLLM_FILE}: is_valid_sequence max_prompt_len 1024")}},
          {"quantiles": q_out, "how": f"derived: lognormal sigma 0.75 truncated to [4, 2044], table mean "
                                       f"{aim_out:.1f} so that pair-filtered draws average {mean_out:.1f}",
           "facts": {"mean": (round(mean_out, 1), "pooled measured runs (generated tokens; EOS honoured, so at "
                                                  "most the requested lengths)"),
                     "sigma": (0.75, "assumption, as sharegpt_lengths.yaml"),
                     "min": (4, f"{VLLM_FILE}: is_valid_sequence min_len 4 (output too)"),
                     "max": (2044, "max_total_tokens less the shortest prompt")}},
          SHAREGPT_SPEARMAN,
          extra=f"max_total_tokens: {{value: {VLLM_MAX_TOTAL}, source: '{VLLM_FILE}: is_valid_sequence "
                f"max_total_len 2048 (pairs over it are redrawn)'}}\n" + _runs_yaml([*VLLM_RUNS, check], "honoured"))


def sharegpt_sglang() -> None:
    mean_in, mean_out = pooled_means(SGLANG_RUNS)
    sigma = shared_prompt_sigma(pooled_means(VLLM_RUNS)[0], mean_in)
    q_in, med_in = truncated_quantiles(mean_in, sigma, 2, SGLANG_PROMPT_MAX, TAIL_PROBS)
    q_out, med_out = truncated_quantiles(mean_out, 0.75, 2, SGLANG_ANSWER_MAX, TAIL_PROBS)
    runs = "; ".join(f"{r[0]}: {r[3]:,} / {r[4]:,}" for r in SGLANG_RUNS)
    write("sharegpt_sglang", _paragraphs(f"""
ShareGPT as SGLang's `python -m sglang.bench_serving --dataset-name sharegpt` (its default
dataset) samples it (sample_sharegpt_requests, {SGLANG_FILE}): conversations with two or more
turns, shuffled with --seed (default 1), the first human turn as the prompt and the first
answer's token count as the output; pairs kept with prompt and answer >= 2 tokens, and no length
bound unless --sharegpt-context-len (then prompt + answer <= it: WorkloadSpec.max_len). The sglang
backend sends ignore_eos unless --disable-ignore-eos, so each request generates exactly the
answer's length.

MEASURED MEANS, DERIVED SHAPE: the means are the pooled totals of three published 1000-prompt
runs (total input / generated tokens: {runs}), the same seed-1 draw under three tokenizers.

Prompt side: a lognormal truncated to [2, {SGLANG_PROMPT_MAX}] whose sigma ({sigma:.3f}) is solved together
with sharegpt_vllm's (header there); answer side: a lognormal, sigma 0.75 (sharegpt_lengths.yaml's
assumption), truncated to [2, {SGLANG_ANSWER_MAX}]. Finer tail probabilities (p99.5, p99.9) because
nothing bounds the prompts below the long tail."""),
          "the served model's (gpt-oss o200k, Kimi-K2, DeepSeek-V3 BPE in the measured runs)",
          {"quantiles": q_in, "how": f"derived: lognormal sigma {sigma:.3f} truncated to [2, {SGLANG_PROMPT_MAX}], "
                                      f"median {med_in:.1f} solved so the table mean is {mean_in:.1f}",
           "facts": {"mean": (round(mean_in, 1), f"pooled measured runs (measured_runs below): {runs}"),
                     "sigma": (round(sigma, 3), "derived: solved with sharegpt_vllm's prompt side (header)"),
                     "min": (2, f"{SGLANG_FILE}: prompts under 2 tokens are pruned"),
                     "max": (SGLANG_PROMPT_MAX, "assumption: the sampler sets no bound; this one keeps the "
                                                "lognormal's tail finite (its p99.9 is about 4.5k tokens)")}},
          {"quantiles": q_out, "how": f"derived: lognormal sigma 0.75 truncated to [2, {SGLANG_ANSWER_MAX}], "
                                       f"median {med_out:.1f} solved so the table mean is {mean_out:.1f}",
           "facts": {"mean": (round(mean_out, 1), "pooled measured runs (EOS ignored: the answers' lengths)"),
                     "sigma": (0.75, "assumption, as sharegpt_lengths.yaml"),
                     "min": (2, f"{SGLANG_FILE}: answers under 2 tokens are pruned"),
                     "max": (SGLANG_ANSWER_MAX, "assumption: the ChatGPT answers ShareGPT holds fit its "
                                                "4,096-token context")}},
          SHAREGPT_SPEARMAN, extra=_runs_yaml(SGLANG_RUNS, "ignored"),
          probs=(TAIL_PROBS, "choice: every 5%, p99, p99.5 and p99.9, so the unbounded tail is not one segment"))


if __name__ == "__main__":
    openorca()
    cnn_dailymail()
    longbench()
    sharegpt_vllm()
    sharegpt_sglang()
    for name in ("openorca", "cnn_dailymail", "longbench", "sharegpt_vllm", "sharegpt_sglang"):
        print(f"wrote {DATA / f'{name}_lengths.yaml'}")
