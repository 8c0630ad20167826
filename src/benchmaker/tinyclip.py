"""Build a tiny, randomly initialised open_clip model as a ``local-dir:`` folder.

For offline smoke runs and tests only: its embeddings are random, so annotations and scores made with
it mean nothing. It goes through open_clip's real loading path (``model="local-dir:<folder>"``).

    python -m benchmaker.tinyclip .cache/tiny-clip
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .smoke import TINY_CLIP_CFG  # noqa: E402 - defined beside the smoke-test check that recognises it

OPENAI_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_STD = [0.26862954, 0.26130258, 0.27577711]


def make_tiny_clip(dest: str | Path, seed: int = 0) -> Path:
    """Write ``open_clip_config.json`` + ``open_clip_model.safetensors`` into ``dest``; returns it."""
    from . import _tvshim

    _tvshim.install()
    import open_clip
    import torch
    from open_clip.model import CLIP
    from safetensors.torch import save_file

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = CLIP(**TINY_CLIP_CFG)
    model.eval()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(dest / "open_clip_model.safetensors"))
    (dest / "open_clip_config.json").write_text(json.dumps({
        "model_cfg": TINY_CLIP_CFG,
        "preprocess_cfg": {"mean": OPENAI_MEAN, "std": OPENAI_STD},
        "benchmaker_tinyclip": True,   # read by benchmaker.smoke: runs with this model are smoke tests
    }, indent=2))
    del open_clip
    return dest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    dest = Path(argv[0] if argv else ".cache/tiny-clip")
    if (dest / "open_clip_model.safetensors").exists():
        print(f"tiny CLIP already at {dest}")
        return 0
    make_tiny_clip(dest)
    print(f"wrote a random tiny CLIP to {dest} (use model: local-dir:{dest})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
