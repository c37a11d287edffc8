"""Which Linux driver a CUDA runtime needs: NVIDIA's published minimums, as data.

Two different bars (NVIDIA, "CUDA Compatibility" and the CUDA Toolkit release notes, table
"CUDA Toolkit and Corresponding Driver Versions"): a driver at or above a major's
minor-version-compatibility minimum runs any runtime of that major (PTX JIT and some newer
features excepted); the toolkit's own release driver supports that exact release in full.
"""

from __future__ import annotations

from gpudoctor.analysis.env_text import version_tuple

# CUDA major -> the oldest driver that runs any runtime of that major through minor-version
# compatibility (the ">= 450.80.02" row of the compatibility table, and its 12.x/13.x rows).
MIN_DRIVER_MVC = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
# CUDA major.minor -> the driver its toolkit GA shipped with: the one that supports it in full.
RELEASE_DRIVER = {
    "11.0": "450.36.06", "11.1": "455.23", "11.2": "460.27.03", "11.3": "465.19.01",
    "11.4": "470.42.01", "11.5": "495.29.05", "11.6": "510.39.01", "11.7": "515.43.04",
    "11.8": "520.61.05", "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03",
    "12.3": "545.23.06", "12.4": "550.54.14", "12.5": "555.42.02", "12.6": "560.28.03",
    "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06",
}


def mvc_minimum(cuda: str) -> str | None:
    """The driver that runs CUDA ``cuda``'s major at all (``None``: a major we have no row for)."""
    return MIN_DRIVER_MVC.get(version_tuple(cuda)[0])


def release_driver(cuda: str) -> str | None:
    """The driver that supports CUDA ``cuda`` in full (``None``: a release we have no row for)."""
    major_minor = ".".join(str(p) for p in (version_tuple(cuda) + (0,))[:2])
    return RELEASE_DRIVER.get(major_minor)


def driver_at_least(driver: str, minimum: str) -> bool:
    """``"470.82.01"`` >= ``"450.80.02"``, compared part by part as numbers."""
    return version_tuple(driver) >= version_tuple(minimum)


def upgrade_text(cuda: str) -> str:
    """The driver upgrade that fixes a CUDA ``cuda`` runtime: its release driver, and the
    minor-version-compatibility minimum when that is lower."""
    full, mvc = release_driver(cuda), mvc_minimum(cuda)
    if full is None and mvc is None:
        return f"upgrade the NVIDIA driver to one that supports CUDA {cuda}"
    if full is None:
        return (f"upgrade the NVIDIA driver to ≥ {mvc} (runs CUDA {version_tuple(cuda)[0]}.x "
                "through minor-version compatibility)")
    text = f"upgrade the NVIDIA driver to ≥ {full} (CUDA {cuda}'s release driver"
    if mvc is not None and version_tuple(mvc) < version_tuple(full):
        text += f"; ≥ {mvc} runs it through minor-version compatibility"
    return text + ")"
