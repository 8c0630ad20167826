"""Make the workflow's Snakemake profiles resolvable by bare name (``snakemake --profile nrp``).

Snakemake looks a bare ``--profile NAME`` up in the current directory, the user's Snakemake config
directory (``~/.config/snakemake`` on Linux) and the site directory (``/etc/xdg/snakemake``).
:func:`install_profiles` links (or copies) the checkout's ``profiles/<name>`` folders into the user
directory once, so that ``snakemake --profile slurm`` and ``--profile nrp`` work as written, while
``--profile profiles/nrp`` keeps working without any install step.

``profiles/default`` is never installed: Snakemake already loads it from the checkout as the
*workflow profile* on every run, and it is not meant to be selected with ``--profile``.

Nothing that is not ours is ever replaced: an existing entry at the destination is left alone (and
reported as an error) unless it is already a link to the very same profile folder.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from benchmaker.logs import get_logger

log = get_logger(__name__)

#: profiles meant for ``--profile NAME``
CLUSTER_PROFILES = ("slurm", "nrp")

PROFILE_FILES = ("profile.yaml", "config.yaml")


class ProfileInstallError(RuntimeError):
    """A destination exists and is not the profile we would install."""


def profiles_source() -> Path:
    """The ``profiles/`` folder of this checkout.

    The library lives in ``<checkout>/src/benchmaker``; for a non-editable install the profiles
    are looked for in the current directory (the repository root), where Snakemake runs anyway.
    """
    here = Path(__file__).resolve().parents[2] / "profiles"
    for candidate in (here, Path.cwd() / "profiles"):
        if all((candidate / name / "profile.yaml").is_file() for name in CLUSTER_PROFILES):
            return candidate
    raise FileNotFoundError(
        "no profiles/ folder with slurm/ and nrp/ found next to the benchmaker sources or in the "
        "current directory; run this from the benchmaker repository root"
    )


def user_profile_dir() -> Path:
    """Where Snakemake looks up bare profile names for this user (its ``user_config_dir``)."""
    try:  # the very function Snakemake uses (platformdirs ships with Snakemake)
        from platformdirs import AppDirs

        return Path(AppDirs("snakemake", "snakemake").user_config_dir)
    except ImportError:  # pragma: no cover - platformdirs missing: the Linux/XDG answer
        if sys.platform == "darwin":
            return Path.home() / "Library" / "Application Support" / "snakemake"
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        return Path(base) / "snakemake"


def _same_link(dest: Path, src: Path) -> bool:
    return dest.is_symlink() and Path(os.path.realpath(dest)) == src.resolve()


def install_profiles(
    dest: Path | None = None,
    *,
    names: tuple[str, ...] | list[str] = CLUSTER_PROFILES,
    copy: bool = False,
    source: Path | None = None,
) -> list[Path]:
    """Install the cluster profiles under ``dest`` (default: Snakemake's user config dir).

    Each ``profiles/<name>`` becomes ``dest/<name>``: a symbolic link to the checkout by default
    (profile edits and ``git pull`` take effect at once), or a copy with ``copy=True`` (for a
    checkout that will move; edit the copy to adapt it to your cluster).

    Returns the installed paths. Re-running is a no-op for links that already point at the
    profile. An existing different file, folder or link is never touched:
    :class:`ProfileInstallError` names it so that the user can move it away.
    """
    src_root = (source or profiles_source()).resolve()
    dest = Path(dest) if dest is not None else user_profile_dir()
    dest.mkdir(parents=True, exist_ok=True)
    installed: list[Path] = []
    conflicts: list[str] = []
    for name in names:
        src = src_root / name
        if not any((src / f).is_file() for f in PROFILE_FILES):
            raise FileNotFoundError(f"{src} is not a Snakemake profile (no profile.yaml)")
        target = dest / name
        if _same_link(target, src):
            log.info("profile %s already installed: %s -> %s", name, target, src)
            installed.append(target)
            continue
        if target.exists() or target.is_symlink():
            conflicts.append(f"{target} exists and is not a link to {src}")
            continue
        if copy:
            tmp = dest / f".{name}.tmp-{os.getpid()}"
            shutil.copytree(src, tmp)
            os.replace(tmp, target)
        else:
            target.symlink_to(src, target_is_directory=True)
        log.info("installed profile %s: %s (%s %s)", name, target, "copy of" if copy else "->", src)
        installed.append(target)
    if conflicts:
        raise ProfileInstallError(
            "not replacing existing entries (move them away, or pass another dest): "
            + "; ".join(conflicts)
        )
    return installed
