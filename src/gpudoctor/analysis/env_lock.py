"""``check --lock DIR``: an environment that rebuilds, from a recorded one (``check --freeze``).

Pure: a :class:`~gpudoctor.records.env.FrozenEnv` in, the text of two files out; the CLI writes
them. ``requirements.lock`` pins the exact versions the record holds (torch with its wheel
variant suffix, ``+cu130``/``+cpu``, and the PyTorch index that serves that variant; every other
package from pip's default index); the ``Dockerfile`` starts from the official PyTorch CUDA image
of the recorded torch and CUDA and installs the lock on top, so the exact torch build is what
runs even when the image's own torch differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.analysis.env_text import cudnn_words, version_tuple
from gpudoctor.records.env import FrozenEnv

LOCK_FILE = "requirements.lock"
DOCKERFILE = "Dockerfile"
# PyTorch's wheel index for one variant (cu130, cu126, cpu, rocm6.4): the only index written.
TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"
# The official image of a torch release for one CUDA and cuDNN major: Docker Hub's
# pytorch/pytorch repository names its runtime images this way (e.g. 2.5.1-cuda12.4-cudnn9-runtime).
IMAGE = "pytorch/pytorch:{torch}-cuda{cuda}-cudnn{cudnn}-runtime"
# cuDNN major the PyTorch images ship when the record has no cuDNN version: every CUDA wheel of
# torch since 2.3 depends on nvidia-cudnn 9.
DEFAULT_CUDNN_MAJOR = 9
# The torch family: their versions follow torch's and they come from the same index.
TORCH_FAMILY = ("torch", "torchvision", "torchaudio", "triton")
# Environment variables a base image sets itself (their version labels), not settings to copy.
IMAGE_OWNED_ENV_SUFFIX = "_VERSION"


@dataclass(frozen=True, slots=True)
class LockFiles:
    """The two files ``check --lock DIR`` writes, and the base image with how it was chosen."""

    requirements: str
    dockerfile: str
    image: str
    image_exact: bool  # False: a fallback (no CUDA torch recorded), said in the Dockerfile


def torch_base(version: str) -> str:
    """``"2.11.0+cu130"`` → ``"2.11.0"``: the release without the wheel variant label."""
    return version.split("+", 1)[0]


def torch_pin(env: FrozenEnv) -> str | None:
    """``torch==<release>+<variant>`` (``None`` when the record has no torch)."""
    if not env.torch_version:
        return None
    if env.torch_variant:
        return f"torch=={torch_base(env.torch_version)}+{env.torch_variant}"
    return f"torch=={env.torch_version}"


def _requirement_name(spec: str) -> str:
    for i, ch in enumerate(spec):
        if ch in "<>=!~;[ ":
            return spec[:i].strip().lower().replace("_", "-")
    return spec.strip().lower().replace("_", "-")


def requirements_lock(env: FrozenEnv, own_requirements: Sequence[str] = ()) -> str:
    """The text of ``requirements.lock``.

    ``own_requirements``: gpudoctor's dependencies as it declares them (``"rich>=13.0"``); each
    one the record pins is written exactly, the others with the range gpudoctor requires.
    """
    lines = ["# requirements.lock: written by `gpudoctor check --lock` from a recorded environment",
             f"# recorded: Python {env.python} on {env.platform}"]
    if env.driver_version:
        lines.append(f"# driver {env.driver_version} (CUDA {env.driver_cuda_version or '?'}); GPUs: "
                     + (", ".join(env.gpu_names) or "none recorded"))
    if env.torch_version:
        cudnn = cudnn_words(env.cudnn_version) if env.cudnn_version else "?"
        lines.append(f"# torch {env.torch_version}: CUDA {env.torch_cuda or 'none'}, cuDNN {cudnn}, "
                     f"NCCL {env.nccl_version or '?'}")
    py = ".".join(str(p) for p in version_tuple(env.python)[:2])
    lines.append(f"# install: pip install -r {LOCK_FILE}   (with Python {py}, as recorded)")
    pins = {name: version for name, version in env.packages.items() if name != "torch"}
    if env.torch_variant:
        lines += [f"# torch's {env.torch_variant} wheels come from the PyTorch index of that variant; "
                  "torchvision and",
                  "# torchaudio pinned to a release pick that index's build of it (its +variant "
                  "label sorts higher);",
                  "# every other package comes from pip's default index.",
                  f"--extra-index-url {TORCH_INDEX.format(variant=env.torch_variant)}"]
    body = []
    pin = torch_pin(env)
    if pin is not None:
        body.append(pin)
    else:
        lines.append("# torch was not installed where this environment was recorded")
    family = [n for n in TORCH_FAMILY[1:] if n in pins]
    body += [f"{n}=={pins[n]}" for n in family]
    body += [f"{n}=={pins[n]}" for n in sorted(pins) if n.startswith("nvidia-")]
    body += [f"{n}=={pins[n]}" for n in sorted(pins) if n not in TORCH_FAMILY and not n.startswith("nvidia-")]
    out = lines + body
    unrecorded = [spec for spec in own_requirements if _requirement_name(spec) not in env.packages
                  and ";" not in spec]
    if unrecorded:
        out.append("# gpudoctor's own dependencies the record does not pin: the ranges it requires")
        out += sorted(unrecorded, key=_requirement_name)
    return "\n".join(out) + "\n"


def base_image(env: FrozenEnv) -> tuple[str, bool, list[str]]:
    """The Dockerfile's base image, whether it is the exact official one, and why (comments)."""
    py = ".".join(str(p) for p in version_tuple(env.python)[:2])
    rule = [f"# base image rule: {IMAGE.format(torch='<torch release>', cuda='<CUDA major.minor>', cudnn='<cuDNN major>')},",
            "# the official PyTorch image of the recorded torch release and its CUDA runtime."]
    if env.torch_version and env.torch_cuda and env.torch_variant and env.torch_variant.startswith("cu"):
        major, minor = (version_tuple(env.torch_cuda) + (0,))[:2]
        if env.cudnn_version:
            cudnn = env.cudnn_version // 10000 if env.cudnn_version >= 10000 else env.cudnn_version // 1000
            why = []
        else:
            cudnn = DEFAULT_CUDNN_MAJOR
            why = [f"# cuDNN was not recorded: cudnn{cudnn}, what torch's CUDA wheels depend on since 2.3."]
        image = IMAGE.format(torch=torch_base(env.torch_version), cuda=f"{major}.{minor}", cudnn=cudnn)
        why += ["# If Docker Hub has no such tag (not every torch release is built for every CUDA),",
                "# take the same torch release with the nearest CUDA the driver supports: the",
                f"# {LOCK_FILE} installed below puts the exact recorded torch build in either way.",
                f"# The image's Python may differ from the recorded {py}; the lock pins packages, not Python."]
        return image, True, rule + why
    what = (f"torch {env.torch_version} ({env.torch_variant or 'unknown variant'})" if env.torch_version
            else "no torch")
    return (f"python:{py}-slim", False, rule + [
        f"# fallback: the record has {what}, no CUDA build of torch, so no official PyTorch CUDA image",
        f"# matches; a plain Python {py} image, with the lock's torch on top."])


def _env_value(value: str) -> str:
    """A double-quoted ``ENV`` value: backslash, quote and ``$`` escaped, no line breaks."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return '"' + escaped.replace("\n", " ") + '"'


def dockerfile(env: FrozenEnv) -> tuple[str, str, bool]:
    """The text of the ``Dockerfile``, its base image and whether that image is exact."""
    image, exact, why = base_image(env)
    lines = ["# syntax=docker/dockerfile:1",
             "# Dockerfile: written by `gpudoctor check --lock` from a recorded environment.",
             *why]
    if env.driver_cuda_version:
        lines.append(f"# Run it on a host whose driver supports CUDA {env.torch_cuda or env.driver_cuda_version} "
                     f"(recorded: driver {env.driver_version}), with")
        lines.append("# the NVIDIA Container Toolkit: docker run --gpus all ...")
    lines.append(f"FROM {image}")
    settings = {k: v for k, v in sorted(env.env.items()) if not k.endswith(IMAGE_OWNED_ENV_SUFFIX)}
    if settings:
        lines.append("# the recorded settings that change how CUDA, NCCL or torch behave")
        lines += [f"ENV {key}={_env_value(value)}" for key, value in settings.items()]
    lines += ["WORKDIR /workspace",
              f"COPY {LOCK_FILE} /tmp/{LOCK_FILE}",
              f"RUN python -m pip install --no-cache-dir -r /tmp/{LOCK_FILE}"]
    return "\n".join(lines) + "\n", image, exact


def lock_files(env: FrozenEnv, own_requirements: Sequence[str] = ()) -> LockFiles:
    """Both files of ``check --lock`` for ``env``."""
    text, image, exact = dockerfile(env)
    return LockFiles(requirements=requirements_lock(env, own_requirements), dockerfile=text,
                     image=image, image_exact=exact)


__all__ = ["DOCKERFILE", "LOCK_FILE", "LockFiles", "base_image", "dockerfile", "lock_files",
           "requirements_lock", "torch_pin"]
