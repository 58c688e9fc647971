"""Probe builds of the scan kernel against the shipped one: each variant (PROBES) patches scan.cu's source
(common.probe_source) for every plan it runs; "deterministic" runs the plans of torch's deterministic mode;
"deterministic+PROBE" those built as PROBE; "held<S>x<H>@<N>" runs chained forwards of S steps per thread, the
first H of them held in registers (ScanPlan.held), N blocks per SM; "unheld" runs the solver's best plans holding no
steps where its plan holds some; "settled" runs the shipped plans with the backward's inputs settled (run_scan's
`settled`, as autograd launches it; every other variant's backward waits for the forward before it stages them), and
"settled+PROBE" those built as PROBE so.

Each variant of the solver's plans runs a linear_scan forward + backward pair (the paired forward's plan, then the
backward's) and the forward alone, as device time per call in CUDA graphs (common.time_graph), the variants taking
turns over --rounds rounds in one process, on random inputs (decays in (0.5, 1), or with --decays near-one in
(0.999, 1)). Every variant's outputs and gradients are checked against a float64 reference
(reference.linear_scan_chunked and its autograd gradients).

Usage: python benchmarks/scan_probe_ab.py [--rounds 6] [--variants sleep100,sleep400] [--problems 1x65536x64:fp32,...]
       [--decays near-one] [--name scan_probe_ab]
Writes scan_probe_ab.{csv,md} (or --name's) to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import re
import statistics

import torch

import common
from flashrnn_kernels.scan.function import device_plan, run_scan
from flashrnn_kernels.runtime.device import device_gpu
from flashrnn_kernels.scan.plan import ScanPlan, carry_plan
from flashrnn_kernels.scan.reference import linear_scan_chunked
from bench_scan import THIN_DECAYS
from scan_pair_timeline import DTYPES

PROBLEMS = ["1x65536x64:fp32", "1x65536x64:bf16", "4x16384x64:fp32", "1x65536x256:fp32", "8x4096x1536:fp32",
            "8x4096x1536:bf16"]

POLL = "                } while (stale != 0);"


def _sleep(ns: int) -> list[tuple[str, str]]:
    """A look-back row whose predecessor's words are not all published sleeps `ns` before it polls them again."""
    return [(POLL, f"                    if (stale != 0) __nanosleep({ns});\n")]


SKIP = "                if (T < 0)  // probe: never\n"
NO_STORES = [(f"                {line};", SKIP) for line in (
    "if constexpr ((SCAN_WANTED & 1) != 0) store_pack(y1 + off, g1)",
    "if constexpr ((SCAN_WANTED & 2) != 0) store_pack(y2 + off, g2)", "store_pack(y1 + off, state)")]
"""Wrong results, a timing probe: the outputs are computed and never stored."""
NO_LOOKBACK = [(f"        for (int base = {loop}", SKIP[8:]) for loop in (
    "seg - 1; any_open && base >= singles_end; base -= SCAN_THREADS_T)",
    "singles_end / SCAN_GROUP - 1; any_open && base >= 0; base -= SCAN_THREADS_T)")]
"""Wrong results, a timing probe: no segment looks back (each takes 0 as its carry-in)."""
UNGROUPED = [("#define SCAN_ROW (SCAN_TILE + 4)", "#undef SCAN_GROUP\n#define SCAN_GROUP (1 << 20)\n")]
"""Look-backs without groups (one group larger than any lane of fewer than 2^20 segments): each composes every earlier
segment's map (or its final state), one by one."""
GROUP_MAPS_ONLY = [("                if (!SCAN_DETERMINISTIC && group_last)\n", SKIP)]
"""A group's words keep its map: its last segment does not publish the group's final state there."""


def _evict_first(when: str) -> list[tuple[str, str]]:
    """Outputs stored evict-first (__stcs: st.global.cs) where the condition `when` holds (e.g. SCAN_REVERSE: the
    backward's gradients only)."""
    return [("    *reinterpret_cast<pack_t*>(p) = out;\n}", f"""    if constexpr (sizeof(pack_t) == 16 && ({when})) {{
        __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&out));
        return;
    }}
""")]


NO_SCAN = [("        float fa[SCAN_VEC], fb[SCAN_VEC];\n", "        if (T > 0) return;  // probe: no fold\n"),
           ("#pragma unroll\n        for (int i = 0; i < SCAN_STEPS; ++i) {\n            const int s = at.s0 + i;\n"
            "            if (decltype(full)::value || s < T) {", "        if (T > 0) return;  // probe: no rescan\n")]
"""Wrong results, a timing probe: the staged chunks are neither folded nor rescanned (phase 2 and the look-back's
composition still run)."""


def _l2_prefetch(size: int) -> list[tuple[str, str]]:
    """Staging copies that ask L2 to fetch the whole `size`-byte block around each 16-byte copy (cp.async's
    .L2::<size>B prefetch size; other accesses as they are)."""
    return [('#include "runtime/relaxed_words.cuh"', f"""__device__ __forceinline__ void cp_async16_prefetch(
    void* dst, const void* src, bool valid) {{
    asm volatile("cp.async.cg.shared.global.L2::{size}B [%0], [%1], 16, %2;\\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}}
#define cp_async16 cp_async16_prefetch
""")]


L2_KEEP = [('#include "runtime/relaxed_words.cuh"', """__device__ __forceinline__ unsigned long long l2_evict_last() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ unsigned long long l2_policy(bool keep) { return keep ? l2_evict_last() : l2_evict_first(); }
"""), ('#include "scan/staging.cuh"', "#define stage_chunk stage_chunk_shipped\n"),
           ("// x1, x2, x3", """#undef stage_chunk
template <StagePart PART>
__device__ __forceinline__ void stage_chunk(elem_t* stage, int buf, const ChunkAt& at, int T, int D,
                                            const elem_t* x1, const elem_t* x2, const elem_t* x3,
                                            const elem_t* dy, const elem_t* h, bool all, Held& held) {
    for_chunk_inputs<PART>(at, T, D, x1, x2, x3, dy, h, all, [&](int k, int i, const elem_t* src) {
        if (!SCAN_REVERSE && i < SCAN_HELD) held.v[i][k] = load_pack(src);
        else stage_copy(staged(stage, buf, k, i, threadIdx.x, threadIdx.y), src, true,
                        l2_policy(!SCAN_REVERSE && k == 0));
    });
}

"""), ("    *reinterpret_cast<pack_t*>(p) = out;\n}", """    if constexpr (sizeof(pack_t) == 16) {
        const uint4 v = *reinterpret_cast<const uint4*>(&out);
        asm volatile("st.global.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "r"(v.x), "r"(v.y),
                     "r"(v.z), "r"(v.w), "l"(l2_policy(!SCAN_REVERSE)) : "memory");
        return;
    }
""")]
"""L2 eviction hints for a forward + backward pair (a probe measured against the kernel before scan.cu's last_use): the
forward's staged a and its stores of h (which the backward reads) evict-last, every other staged input and the
backward's stores evict-first."""


NO_HINTS = [("    return SCAN_EVICT_FIRST && (SCAN_REVERSE || (SCAN_PAIRED && SCAN_CELL == 0 && k == 1));",
             "    return false;  // probe\n")]
"""No staged input is marked evict-first in L2 (scan.cu's last_use)."""

PROBES = {**{f"sleep{ns}": _sleep(ns) for ns in (50, 100, 200, 400, 800, 1600)}, "nostore": NO_STORES,
          "nolookback": NO_LOOKBACK, "nostore_nolookback": NO_STORES + NO_LOOKBACK,
          "stcs_bwd": _evict_first("SCAN_REVERSE"), "stcs_fwd": _evict_first("!SCAN_REVERSE"),
          "stcs_all": _evict_first("true"), "nostore_nolookback_noscan": NO_STORES + NO_LOOKBACK + NO_SCAN,
          "ungrouped": UNGROUPED, "groupmaps": GROUP_MAPS_ONLY, "nohints": NO_HINTS,
          "l2keep": L2_KEEP,
          **{f"l2pf{size}": _l2_prefetch(size) for size in (64, 128, 256)}}
"""variant name -> the (anchor, inserted text) patches of its build."""

_source = common.probe_build_source(ScanPlan.source)


HELD = re.compile(r"held(\d+)x(\d+)@(\d+)")


def _variant(p, v: str):
    """Plan p built as probe v ("base": p itself, the shipped source; "deterministic": p for its problem under
    torch.use_deterministic_algorithms, "deterministic+PROBE" that plan built as PROBE; "held...": see the module
    docstring, backwards and other carries as they are), a plan of its own (common.probe_plan)."""
    if v == "deterministic":
        return p.deterministic_variant()
    if v.startswith("deterministic+"):
        return common.probe_plan(p.deterministic_variant(), PROBES[v.partition("+")[2]])
    if v == "settled":  # the same plans, launched differently (main)
        return p
    if v.startswith("settled+"):
        return _variant(p, v.partition("+")[2])
    if v == "unheld":
        return carry_plan(p.problem, device_gpu(torch.cuda.current_device()), p.carry, held=0) if p.held else p
    if held := HELD.fullmatch(v):
        if p.carry != "chained" or p.problem.direction != "forward":
            return p
        return p.holding(device_gpu(torch.cuda.current_device()), *(int(g) for g in held.groups()))
    return p if v == "base" else common.probe_plan(p, PROBES[v])


def _settled(v: str) -> bool:
    """Whether variant v's backward launches with its inputs settled ("settled", "settled+PROBE")."""
    return v == "settled" or v.startswith("settled+")


def _reference(a, b, dy):
    """h, da, db in float64: linear_scan_chunked and its autograd gradients."""
    a, b = (x.double().requires_grad_() for x in (a, b))
    h = linear_scan_chunked(a, b)
    return h.detach(), *torch.autograd.grad(h, (a, b), dy.double())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--variants", default="sleep100,sleep400,sleep1600")
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--decays", choices=tuple(THIN_DECAYS), default="half",
                        help="decays uniform in (0.5, 1) or (0.999, 1), where no look-back ends early")
    parser.add_argument("--name", default="scan_probe_ab", help="results file name")
    args = parser.parse_args()
    common.require_cuda("scan_probe_ab")
    ScanPlan.source = _source
    variants = ["base", *args.variants.split(",")]
    rows = []
    for text in args.problems.split(","):
        shape, dtype = common.parse_dims(text.split(":")[0]), DTYPES[text.split(":")[1]]
        lo, hi = THIN_DECAYS[args.decays]
        a = (torch.rand(shape, device="cuda") * (hi - lo) + lo).to(dtype)
        b, dy = (torch.randn(shape, device="cuda").to(dtype) for _ in range(2))
        expected = _reference(a, b, dy)
        base_f = device_plan("linear", a, "forward", paired=True)
        base_b = device_plan("linear", a, "backward")
        alone = device_plan("linear", a, "forward")
        plans = {v: (_variant(base_f, v), _variant(base_b, v), _variant(alone, v)) for v in variants}
        errors = {}
        for v, (pf, pb, pa) in plans.items():
            (h,) = run_scan("linear", "forward", (a, b), None, kernel_plan=pf)
            da, db = run_scan("linear", "backward", (a, b), None, dy=dy, h=h, kernel_plan=pb,
                              settled=_settled(v))[:2]
            (h_alone,) = run_scan("linear", "forward", (a, b), None, kernel_plan=pa)
            errors[v] = max(common.relative_error(x, y) for x, y in zip((h, da, db, h_alone), (*expected, expected[0])))
        times: dict = {}
        for r in range(args.rounds):
            for v in (variants if r % 2 == 0 else variants[::-1]):
                pf, pb, pa = plans[v]

                def pair(pf=pf, pb=pb, settled=_settled(v)):
                    (h,) = run_scan("linear", "forward", (a, b), None, kernel_plan=pf)
                    return run_scan("linear", "backward", (a, b), None, dy=dy, h=h, kernel_plan=pb, settled=settled)

                def forward(pa=pa):
                    return run_scan("linear", "forward", (a, b), None, kernel_plan=pa)

                times.setdefault((v, "pair"), []).append(common.time_graph(pair) * 1e3)
                times.setdefault((v, "forward"), []).append(common.time_graph(forward) * 1e3)
        us = {key: statistics.median(values) for key, values in times.items()}
        row = {"problem": text, "plans (paired fwd / bwd / fwd alone)": " / ".join(
            f"{p.carry} {p.threads_d}x{p.threads_t}x{p.steps}" for p in (base_f, base_b, alone)),
            "pair us": us["base", "pair"], "forward us": us["base", "forward"], "error base": errors["base"]}
        for v in variants[1:]:
            row[f"pair {v}"] = us[v, "pair"] / us["base", "pair"]
            row[f"forward {v}"] = us[v, "forward"] / us["base", "forward"]
            row[f"error {v}"] = errors[v]
        rows.append(row)
        print(row, flush=True)
    print(common.write_results(
        args.name, rows, title="linear_scan: probe builds of the scan kernel against the shipped one",
        notes=[f"{args.rounds} alternating rounds; median device time per call (CUDA graphs of 10 calls), the pair "
               "and the forward alone, each variant's relative to the shipped kernel's (base). sleepN: a look-back "
               "row sleeps N ns (__nanosleep) before polling unpublished words again; nostore (wrong results): "
               "outputs computed, never stored; nolookback (wrong results): every segment's carry-in 0; noscan "
               "(wrong results): chunks neither folded nor rescanned; stcs: outputs stored evict-first (__stcs), of "
               "the backward, the forward or all; deterministic: the plan compiled for torch's deterministic mode "
               "(only segment 0 publishes its final state); ungrouped: look-backs without groups' maps; "
               "groupmaps: groups' words hold their maps only, not their final states; l2pfN: staging copies "
               "asking L2 for the N-byte block around them (cp.async .L2::NB); "
               "heldSxH@N: chained forwards of S steps per thread, the "
               "first H loaded into registers instead of the stage (ScanPlan.held), N blocks per SM; unheld: the "
               "solver's best plan holding no steps; settled: the backward stages a before it waits for the forward; "
               "l2keep: the forward's staged a and stored h evict-last in L2, other staged inputs and the backward's "
               "stores evict-first. "
               "decays: "
               f"{THIN_DECAYS[args.decays]}. error: largest relative error of h, da, db (and the forward "
               "alone's h) against float64."]))


if __name__ == "__main__":
    main()
