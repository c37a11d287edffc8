"""The tuple of every rule, and ``--select`` / ``--ignore`` resolution.

Codes are grouped by hundreds: GD1xx device and data movement, GD2xx memory, GD3xx mixed
precision, GD4xx distributed, GD5xx performance and host-device syncs, GD6xx correctness and
safety, GD9xx noisy rules that are off unless selected explicitly.
"""

from __future__ import annotations

from types import ModuleType

from gpudoctor.lint.rules import (
    gd101_discarded_to,
    gd102_cuda_in_dataset,
    gd103_numpy_on_cuda,
    gd104_dataloader_defaults,
    gd201_loss_accumulated_with_graph,
    gd202_outputs_kept_with_graph,
    gd203_empty_cache_in_loop,
    gd204_zero_grad_set_to_none_false,
    gd301_deprecated_cuda_amp,
    gd302_step_inside_autocast,
    gd303_clip_without_unscale,
    gd304_sum_reduction_under_fp16,
    gd305_module_half_in_training,
    gd401_data_parallel,
    gd402_ddp_several_device_ids,
    gd403_set_device_order,
    gd404_distributed_launch,
    gd405_sampler_without_set_epoch,
    gd406_sampler_with_shuffle,
    gd407_save_ddp_wrapper,
    gd408_find_unused_parameters,
    gd409_ddp_loader_without_sampler,
    gd410_nccl_transport_disabled,
    gd501_unsynchronized_timing,
    gd502_host_sync_in_hot_loop,
    gd503_cudnn_deterministic,
    gd504_cuda_launch_blocking,
    gd505_anomaly_detection_on,
    gd601_torch_load_weights_only,
    gd602_step_without_zero_grad,
    gd901_cudnn_benchmark_unset,
    gd902_persistent_workers_unset,
)

ALL_RULES: tuple[ModuleType, ...] = (
    gd101_discarded_to,
    gd102_cuda_in_dataset,
    gd103_numpy_on_cuda,
    gd104_dataloader_defaults,
    gd201_loss_accumulated_with_graph,
    gd202_outputs_kept_with_graph,
    gd203_empty_cache_in_loop,
    gd204_zero_grad_set_to_none_false,
    gd301_deprecated_cuda_amp,
    gd302_step_inside_autocast,
    gd303_clip_without_unscale,
    gd304_sum_reduction_under_fp16,
    gd305_module_half_in_training,
    gd401_data_parallel,
    gd402_ddp_several_device_ids,
    gd403_set_device_order,
    gd404_distributed_launch,
    gd405_sampler_without_set_epoch,
    gd406_sampler_with_shuffle,
    gd407_save_ddp_wrapper,
    gd408_find_unused_parameters,
    gd409_ddp_loader_without_sampler,
    gd410_nccl_transport_disabled,
    gd501_unsynchronized_timing,
    gd502_host_sync_in_hot_loop,
    gd503_cudnn_deterministic,
    gd504_cuda_launch_blocking,
    gd505_anomaly_detection_on,
    gd601_torch_load_weights_only,
    gd602_step_without_zero_grad,
    gd901_cudnn_benchmark_unset,
    gd902_persistent_workers_unset,
)
DEFAULT_OFF_PREFIX = "GD9"
GROUPS = {
    "GD1": "device and data movement",
    "GD2": "memory",
    "GD3": "mixed precision",
    "GD4": "distributed",
    "GD5": "performance and host-device syncs",
    "GD6": "correctness and safety",
    "GD9": "noisy, off by default",
}
RULES_BY_CODE = {rule.CODE: rule for rule in ALL_RULES}


def _split(values: list[str] | tuple[str, ...] | None) -> list[str]:
    out: list[str] = []
    for value in values or ():
        out += [part.strip().upper() for part in value.split(",") if part.strip()]
    return out


def _expand(prefix: str, *, explicit: bool) -> list[str]:
    if prefix == "ALL":
        return list(RULES_BY_CODE)
    codes = [code for code in RULES_BY_CODE if code.startswith(prefix)]
    if not codes:
        raise ValueError(f"unknown rule code or prefix {prefix!r}: use one of "
                         f"{', '.join(sorted(GROUPS))} or a full code such as GD101 (`gpudoctor lint --help`)")
    if explicit and not prefix.startswith(DEFAULT_OFF_PREFIX):
        codes = [code for code in codes if not code.startswith(DEFAULT_OFF_PREFIX)]
    return codes


def select_rules(select: list[str] | tuple[str, ...] | None = None,
                 ignore: list[str] | tuple[str, ...] | None = None) -> tuple[ModuleType, ...]:
    """Resolve ``--select``/``--ignore`` prefixes (comma-separated or repeated) to rule modules.

    Without ``select`` every rule outside the GD9xx range runs. A prefix such as ``GD`` or ``GD4``
    does not switch on GD9xx rules; ``GD9``, ``GD901`` or ``ALL`` does. Raises ``ValueError`` for a
    code or prefix that matches no rule.
    """
    chosen: list[str] = []
    for prefix in _split(select) or ["GD"]:
        chosen += _expand(prefix, explicit=True)
    dropped = {code for prefix in _split(ignore) for code in _expand(prefix, explicit=False)}
    keep = [code for code in dict.fromkeys(chosen) if code not in dropped]
    return tuple(RULES_BY_CODE[code] for code in sorted(keep))
