"""Markdown tables of the corpus results (``corpus-verdicts.md``, ``corpus-ab.md``)."""

from __future__ import annotations


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.0f}%" if signed else f"{100 * value:.0f}%"


def _num(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _head(doc: dict) -> list[str]:
    sources = doc.get("sources") or {}
    lines = [f"GPU: {doc.get('gpu')}; torch {doc.get('torch')}, torchvision {doc.get('torchvision')}; "
             f"`gpudoctor run --steps {doc.get('steps')}`" + (" (CPU check, tiny settings)" if doc.get("cpu_check") else "")]
    for repo in sources.values():
        lines.append(f"- {repo.get('repo')} @ {str(repo.get('commit'))[:12]} ({repo.get('date')})")
    return lines


def verdicts_markdown(doc: dict) -> str:
    lines = ["# Corpus verdicts", ""] + _head(doc) + [""]
    lines.append("| script | status | wall s | verdict (top WARN/ERROR) | expected gain | step ms median / mean "
                 "| throughput | GPU busy | compute | host | data wait | top kernel |")
    lines.append("|" + "---|" * 12)
    for r in doc["rows"]:
        v = r.get("verdict") or {}
        kernels = r.get("top_kernels") or []
        top_k = (f"{kernels[0]['name'][:48]} ({_pct(kernels[0].get('share_of_busy'))})" if kernels else "-")
        title = (v.get("code") or "none") + (f": {v.get('title')}" if v.get("code") else "")
        status = r.get("status") or r.get("error", "?")
        if r.get("timed_out"):
            status += " (timeout)"
        lines.append(
            f"| {r['name']} | {status} | {_num(r.get('wall_s'))} | {title.replace('|', '/')} | "
            f"{_pct(v.get('expected_gain'))} | {_num(r.get('step_ms'), '.2f')} / {_num(r.get('mean_step_ms'), '.2f')} | "
            f"{_num(r.get('throughput'), ',.0f')} {r.get('unit') or ''} | {_pct(r.get('gpu_busy'))} | "
            f"{_pct(r.get('compute_share'))} | {_pct(r.get('host_share'))} | {_pct(r.get('data_wait_share'))} | "
            f"{top_k.replace('|', '/')} |")
    lines += ["", "Top kernels of each profiler window (share of the window's GPU busy time):", ""]
    for r in doc["rows"]:
        kernels = r.get("top_kernels") or []
        if not kernels:
            continue
        lines.append(f"- **{r['name']}**: " + "; ".join(
            f"`{k['name'][:70]}` x{k.get('count')} {_pct(k.get('share_of_busy'))}" for k in kernels))
    errors = [(r["name"], k, v) for r in doc["rows"] for k, v in r.items() if k.startswith("error") and v]
    if errors:
        lines += ["", "Errors:", ""] + [f"- {n}: {k}: {v}" for n, k, v in errors]
    lines += ["", f"total wall time {doc.get('total_wall_s')} s"]
    return "\n".join(lines) + "\n"


def ab_markdown(doc: dict) -> str:
    lines = ["# Corpus: prescribed fix applied by hand, measured (A = original, B = patched copy)", ""]
    lines += _head(doc) + [f"rounds A B A B...: {doc.get('rounds')}; confirmed = median throughput gain "
                           f">= {_pct(doc.get('bar'))}, every round faster and above A's run-to-run range", ""]
    lines.append("| script | verdict | fix applied | predicted (step time saved) | measured: step time saved "
                 "| throughput gain median [min, max] | A noise | confirmed | verdict after the fix |")
    lines.append("|" + "---|" * 9)
    for r in doc["rows"]:
        m = r.get("measured") or {}
        gains = m.get("gains") or []
        spread = f"[{_pct(min(gains), True)}, {_pct(max(gains), True)}]" if gains else ""
        after = (r.get("after_verdict") or {}).get("code") or ("none" if r.get("after_verdict") else "-")
        lines.append(
            f"| {r['name']} | {r.get('verdict_code') or 'none'} | {r.get('fix') or '-'} | "
            f"{_pct(r.get('predicted_saving'))} | {_pct(m.get('saving_median'))} | "
            f"{_pct(m.get('gain_median'), True)} {spread} | {_pct(m.get('noise_a'))} | "
            f"{r.get('outcome', '-')} | {after} |")
    lines += ["", f"total wall time {doc.get('total_wall_s')} s"]
    if doc.get("not_run"):
        lines += ["", "Not run (time budget): " + ", ".join(doc["not_run"])]
    return "\n".join(lines) + "\n"
