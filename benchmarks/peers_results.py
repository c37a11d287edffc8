"""The figures of ``peers.py`` once measured: the ratios against the goals, the table, and the merge of
a re-run into an earlier results file (``--merge-into``). Plain data in, plain data out (no torch)."""

from __future__ import annotations


def ratios(r: dict) -> dict:
    def rate(k):
        v = r.get(k, {})
        return v.get("img_per_s") or v.get("tok_per_s")

    out = {}
    peers = [rate(k) for k in ("resnet/plain", "resnet/lightning_bf16", "resnet/accelerate_bf16") if rate(k)]
    if rate("resnet/gpudoctor_defaults") and peers:
        out["resnet_defaults_vs_best_peer (goal >= 1.0)"] = rate("resnet/gpudoctor_defaults") / max(peers)
    for peer in ("resnet/lightning_bf16", "resnet/accelerate_bf16"):
        if rate("resnet/gpudoctor_gpu_loader") and rate(peer):
            out[f"resnet_gpu_loader_vs_{peer.split('/')[1]} (goal >= 1.4)"] = \
                rate("resnet/gpudoctor_gpu_loader") / rate(peer)
    if rate("gpt124m/gpudoctor_compiled") and rate("gpt124m/hand_compiled"):
        out["gpt124m_engine_vs_hand_compiled (goal >= 1.0)"] = \
            rate("gpt124m/gpudoctor_compiled") / rate("gpt124m/hand_compiled")
    if r.get("gpt350m/gpudoctor_compiled", {}).get("mfu_vs_989"):
        out["gpt350m_mfu_vs_989 (goal >= 0.45)"] = r["gpt350m/gpudoctor_compiled"]["mfu_vs_989"]
    return out


def print_table(results: dict, derived: dict) -> None:
    print(f"\n{'configuration':40} {'throughput':>16} {'MFU':>7} {'wall s':>7}  run (UTC)")
    for name, r in results.items():
        rate = r.get("img_per_s") or r.get("tok_per_s")
        unit = "img/s" if "img_per_s" in r else "tok/s"
        mfu = r.get("mfu_vs_989")
        shown = f"{rate:>10,.0f} {unit}" if rate else (r.get("skipped") or r.get("error", "")[:40])
        print(f"{name:40} {shown:>16} {'' if mfu is None else f'{100 * mfu:.1f}%':>7} {r.get('wall_s', 0):>7}"
              f"  {r.get('run_utc', '')}")
    for k, v in derived.items():
        print(f"{k:60} {v:.3f}")


def merge_runs(old: dict, new: dict) -> dict:
    """``new``'s entries over ``old``'s; every entry keeps the ``run_utc`` of the run that measured it
    (``old``'s untagged entries get ``old["date_utc"]``); ``runs`` lists each run's command and names."""
    results = {name: {"run_utc": old.get("date_utc", ""), **entry} for name, entry in old.get("results", {}).items()}
    for name, entry in new["results"].items():
        if "skipped" in entry and name in results and "skipped" not in results[name]:
            continue  # not re-measured this time: the earlier measurement (or error) stands
        results[name] = entry
    runs = old.get("runs") or [{"date_utc": old.get("date_utc", ""), "command": old.get("command", ""),
                                "configurations": sorted(old.get("results", {}))}]
    runs = [*runs, {"date_utc": new["date_utc"], "command": new["command"], "configurations": sorted(new["results"])}]
    doc = {**new, "results": results, "runs": runs, "ratios": ratios(results),
           "note": "entries come from several runs on the same kind of machine; see each entry's run_utc and 'runs'"}
    return doc
