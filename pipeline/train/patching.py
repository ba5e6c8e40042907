"""Weight-space patching (WiSE-FT; CLoVe's post-step): w = (1 - alpha) * w_pretrained + alpha * w_finetuned.

    python -m pipeline.train.patching --model ViT-B-32 --pretrained openai \\
        --finetuned out/hp_hn/final.pt --alpha 0.5 --out out/hp_hn/patched_0.5.pt
    python -m pipeline.train.patching ... --alpha 0.25 0.5 0.75 --out out/hp_hn/patched/   # a sweep: one file each

alpha = 0 gives the pretrained weights and alpha = 1 the finetuned ones, exactly. Outputs are {"model":
state_dict, "quick_gelu", "alpha", "pretrained", "finetuned"}, loadable by pipeline.train.clip.create(model, path).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.train.checkpoint import atomic_save
from pipeline.train.clip import UsageError
from pipeline.train.finetune import load_model


def patch(pretrained_state: dict, finetuned_state: dict, alpha: float) -> dict:
    """Float tensors interpolated as (1 - alpha) * pretrained + alpha * finetuned (in float32 at least, cast back
    to the finetuned dtype); other tensors (integer buffers) must be equal and are taken from the finetuned."""
    import torch

    if set(pretrained_state) != set(finetuned_state):
        only = sorted(set(pretrained_state) ^ set(finetuned_state))
        raise ValueError(f"the two state dicts differ in keys: {', '.join(only[:5])}{' ...' if len(only) > 5 else ''}")
    patched = {}
    for key, tuned in finetuned_state.items():
        base = pretrained_state[key]
        if base.shape != tuned.shape:
            raise ValueError(f"{key}: shape {tuple(base.shape)} (pretrained) vs {tuple(tuned.shape)} (finetuned)")
        if tuned.is_floating_point():
            wide = torch.promote_types(tuned.dtype, torch.float32)
            # the two-product form (not lerp) so that alpha 0 and 1 return either side bit for bit
            mixed = (1 - alpha) * base.to(wide) + alpha * tuned.to(wide)
            patched[key] = mixed.to(tuned.dtype)
        else:
            if not torch.equal(base, tuned):
                raise ValueError(f"{key}: non-float buffer differs between pretrained and finetuned")
            patched[key] = tuned.clone()
    return patched


def _state(model_name: str, pretrained: str | None, flag: str) -> tuple[dict, bool]:
    """The weights, and whether the architecture they were loaded into uses QuickGELU."""
    from pipeline.train.clip import uses_quick_gelu

    model = load_model(model_name, pretrained, flag=flag)[0]
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, uses_quick_gelu(model)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.train.patching", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="open_clip architecture of both checkpoints.")
    p.add_argument("--pretrained", required=True, help="open_clip tag (openai, ...) or checkpoint path.")
    p.add_argument("--finetuned", required=True, help="Finetuned checkpoint (e.g. <out>/final.pt).")
    p.add_argument("--alpha", type=float, nargs="+", required=True, help="One or more mixing weights in [0, 1].")
    p.add_argument("--out", required=True,
                   help="Output file for one alpha; for several, a folder getting patched_alpha<A>.pt each.")
    return p


def outputs(out: str, alphas: list[float]) -> list[Path]:
    if len(alphas) == 1:
        return [Path(out)]
    return [Path(out) / f"patched_alpha{a:g}.pt" for a in alphas]


def run(args) -> list[Path]:
    for alpha in args.alpha:
        if not 0 <= alpha <= 1:
            raise UsageError(f"--alpha: {alpha} is outside [0, 1]")
    if not Path(args.finetuned).is_file():
        raise UsageError(f"--finetuned: no such file {args.finetuned}")
    pretrained, quick_gelu = _state(args.model, args.pretrained, "--pretrained")
    finetuned, finetuned_quick_gelu = _state(args.model, args.finetuned, "--finetuned")
    if quick_gelu != finetuned_quick_gelu:
        raise UsageError(f"--pretrained={args.pretrained} and --finetuned={args.finetuned} load into different "
                         f"activations (QuickGELU {quick_gelu} vs {finetuned_quick_gelu}): not the same architecture")
    paths = outputs(args.out, args.alpha)
    for alpha, path in zip(args.alpha, paths, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        state = patch(pretrained, finetuned, alpha)
        atomic_save({"model": state, "quick_gelu": quick_gelu, "alpha": alpha, "pretrained": args.pretrained,
                     "finetuned": str(args.finetuned)}, path)
        print(f"alpha {alpha:g}: {path}")
    return paths


def main(argv: list[str] | None = None) -> int:
    from pipeline.train.clip import TrainDependencyMissing

    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except (UsageError, TrainDependencyMissing) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from pipeline.urls import redact_output

    redact_output()  # before anything prints: no secret of a flag reaches the terminal
    sys.exit(main())
