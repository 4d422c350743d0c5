"""``python -m model_bridges.setup FAMILY --venv DIR [--torch-index URL] [--dry-run]``: a bridge host
for one model family in a virtual environment of its own.

The upstream pins of the in-process models conflict with each other and with this project's
environment (MiniCPM-o: transformers 4.51.0, torch ≤ 2.8.0; Freeze-Omni: torch 2.2.0, transformers
4.45.2, silero-vad 5.1.2; moshi 0.2.13: torch < 2.10), so each family gets its own venv holding
only what a bridge host needs: the client SDK (the ``duplex-mpe-client`` wheel built from
``client-dist/``), this package's bridges (``model_bridges``, put on the venv's path), torch as
the family pins it, and the family's extra from ``pyproject.toml`` (the one list of its
requirements). Run from a checkout of the repository. At the end it prints what to download and
where to put it, and the command that starts the bridge (``python -m model_bridges``).

``--torch-index`` is the PyTorch wheel index for the host's CUDA (e.g.
``https://download.pytorch.org/whl/cu128``); without it pip's configured indexes are used (the CPU
build here). Each step is a plain command; ``--dry-run`` prints them and runs nothing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Download:
    what: str
    command: str  # the command that fetches it
    where: str  # where the bridge expects it


@dataclass(frozen=True)
class Family:
    """What a bridge host for one model family installs, fetches and runs."""

    extra: str  # the pyproject.toml extra with the family's requirements
    torch: tuple[str, ...]  # torch (and torchaudio) as upstream pins them
    torch_source: str  # where that pin comes from
    no_deps: tuple[str, ...] = ()  # installed without their own pins
    downloads: tuple[Download, ...] = ()
    run: str = ""  # the bridge command, options included
    notes: tuple[str, ...] = field(default_factory=tuple)


HUB = "the local hub cache ($HF_HOME, default ~/.cache/huggingface); the bridges never download (HF_HUB_OFFLINE=1)"

FAMILIES: dict[str, Family] = {
    "moshi": Family(
        extra="moshi", torch=("torch==2.13.0",),
        torch_source="moshi 0.2.13 pins torch<2.10; it runs with 2.13.0, the torch this project is tested with, "
                     "so moshi is installed without its pins",
        no_deps=("moshi==0.2.13",),
        downloads=(Download("Moshi (moshiko, 7B, bf16)", "hf download kyutai/moshiko-pytorch-bf16", HUB),),
        run="python -m model_bridges moshi --opt checkpoint=kyutai/moshiko-pytorch-bf16 --opt device=cuda"),
    "minicpm-o": Family(
        extra="minicpm", torch=("torch==2.8.0", "torchaudio==2.8.0"),
        torch_source="OpenBMB/MiniCPM-o README.md:1512 (torch>=2.3.0,<=2.8.0, transformers==4.51.0)",
        downloads=(Download("MiniCPM-o 4.5 with its code and assets/HT_ref_audio.wav (the TTS prompt)",
                            "hf download openbmb/MiniCPM-o-4_5", HUB),),
        run="python -m model_bridges minicpm-o --opt checkpoint=openbmb/MiniCPM-o-4_5 --opt device=cuda",
        notes=("Without assets/HT_ref_audio.wav in the checkpoint give --opt ref_audio=WAV: the model makes "
               "no sound without a TTS prompt.",)),
    "voila": Family(
        extra="voila", torch=("torch==2.13.0", "torchaudio==2.13.0"),
        torch_source="maitrix-org/Voila requirements.txt (unpinned torch, torchaudio)",
        downloads=(
            Download("the Voila code (model.py, spkr.py, examples/test1.mp3)",
                     "git clone https://github.com/maitrix-org/Voila DIR/code/Voila", "--opt code=DIR/code/Voila"),
            Download("Voila-autonomous", "hf download maitrix-org/Voila-autonomous-preview", HUB),
            Download("Voila-Tokenizer", "hf download maitrix-org/Voila-Tokenizer", HUB),
            Download("the speaker model", "hf download pyannote/wespeaker-voxceleb-resnet34-LM", HUB)),
        run="python -m model_bridges voila --opt checkpoint=maitrix-org/Voila-autonomous-preview "
            "--opt code=DIR/code/Voila --opt device=cuda"),
    "freeze-omni": Family(
        extra="freeze-omni", torch=("torch==2.2.0", "torchaudio==2.2.0"),
        torch_source="VITA-MLLM/Freeze-Omni requirements.txt (torch==2.2.0, transformers==4.45.2, "
                     "silero-vad==5.1.2)",
        downloads=(
            Download("the Freeze-Omni code (models/, web/vad.py)",
                     "git clone https://github.com/VITA-MLLM/Freeze-Omni DIR/code/Freeze-Omni",
                     "--opt code=DIR/code/Freeze-Omni"),
            Download("Freeze-Omni's checkpoints (audiollm/, decoder/, codec/, server.json)",
                     "hf download VITA-MLLM/Freeze-Omni", HUB),
            Download("its LLM", "hf download Qwen/Qwen2-7B-Instruct", HUB)),
        run="python -m model_bridges freeze-omni --opt checkpoint=VITA-MLLM/Freeze-Omni "
            "--opt llm=Qwen/Qwen2-7B-Instruct --opt code=DIR/code/Freeze-Omni --opt device=cuda --opt dtype=bfloat16"),
}


def extra_requirements(name: str, pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The requirements of one extra, as pyproject.toml lists them."""
    extras = tomllib.loads(pyproject.read_text("utf-8"))["project"]["optional-dependencies"]
    if name not in extras:
        raise SystemExit(f"pyproject.toml has no extra {name!r}")
    return list(extras[name])


def site_packages(venv: Path) -> Path:
    """The venv's site-packages (the layout of this interpreter's version)."""
    rel = Path(sysconfig.get_path("purelib", vars={"base": ".", "platbase": "."}))
    return venv / rel


def steps(family: str, venv: Path, torch_index: str | None = None) -> list[list[str]]:
    """The commands that set the host up (the wheel directory and the copy of the bridges included)."""
    f = FAMILIES[family]
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    wheels = venv / "wheels"
    out = [[sys.executable, "-m", "venv", str(venv)],
           [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels),
            str(ROOT / "client-dist")],
           pip + ["--find-links", str(wheels), "duplex-mpe-client"],
           pip + (["--index-url", torch_index] if torch_index else []) + list(f.torch),
           pip + extra_requirements(f.extra)]
    if f.no_deps:
        out.append(pip + ["--no-deps", *f.no_deps])
    return out


def install_bridges(venv: Path) -> Path:
    """This package, copied beside the venv and put on its path (a ``.pth``): no server comes with it."""
    target = venv / "bridges"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(ROOT / "model_bridges", target / "model_bridges",
                    ignore=shutil.ignore_patterns("__pycache__"))
    pth = site_packages(venv) / "duplex_mpe_bridges.pth"
    pth.write_text(str(target) + "\n")
    return pth


def describe(family: str, venv: Path) -> str:
    f = FAMILIES[family]
    lines = [f"{family}: torch as {f.torch_source}.", "", "Download (on the host, with HF_HUB_OFFLINE=0):"]
    for d in f.downloads:
        lines += [f"  {d.what}:", f"    {d.command.replace('DIR', str(venv))}", f"    -> {d.where.replace('DIR', str(venv))}"]
    lines += ["", "Then run the bridge (HF_HUB_OFFLINE=1):",
              f"  {venv}/bin/{f.run.replace('DIR', str(venv))} --server ws://HOST:8600 --token-file team.token",
              f"  check it first: python bench/gpu_smoke.py {family} … (docs/bridges.md)"]
    lines += [f"Note: {n}" for n in f.notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m model_bridges.setup", description=__doc__.split("\n\n")[0])
    p.add_argument("family", choices=sorted(FAMILIES))
    p.add_argument("--venv", required=True, help="the directory of the new virtual environment")
    p.add_argument("--torch-index", help="the PyTorch wheel index for the host's CUDA")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = p.parse_args(argv)
    venv = Path(a.venv).expanduser().resolve()
    for cmd in steps(a.family, venv, a.torch_index):
        print("+ " + " ".join(cmd), flush=True)
        if not a.dry_run:
            done = subprocess.run(cmd, cwd=ROOT)
            if done.returncode:
                print(f"failed ({done.returncode}): {' '.join(cmd)}", file=sys.stderr)
                return done.returncode
    print(f"+ copy model_bridges/ to {venv / 'bridges'} and put it on the venv's path")
    if not a.dry_run:
        install_bridges(venv)
    print()
    print(describe(a.family, venv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
