"""The console side every benchmark's dataset commands share: one line per message on stderr, known
failures as one line and exit code 2, progress bars, and the data directory."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from clients.errors import MPEError
from server.datasets.synth import SynthReport

console = Console(stderr=True, soft_wrap=True)  # one line per message: easy to grep


def fail(code: str, message: str) -> NoReturn:
    """One line on stderr, ``error (CODE): message``, and exit code 2."""
    console.print(f"[red]error[/red] ({code}): {escape(message)}", highlight=False)
    raise typer.Exit(2)


@contextlib.contextmanager
def errors() -> Iterator[None]:
    """Known failures become one line on stderr and exit code 2, never a traceback."""
    try:
        yield
    except MPEError as exc:
        fail(exc.code, str(exc))
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]: finished clips are cached; run the same command to resume")
        raise typer.Exit(130)
    except OSError as exc:
        fail("io", str(exc))


def progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=console, transient=False)


def data_dir() -> Path:
    from server.settings import Settings

    s = Settings()
    s.ensure_dirs()
    return s.data_dir


def voice_suite(synthesize_suite: Callable[..., SynthReport], path: Path, *, tts: str, workers: int | None) -> None:
    """``mpe dataset synthesize``: a benchmark's ``synthesize_suite`` with a progress bar, then what it did."""
    with progress() as bar:
        task = bar.add_task(f"synthesising ({tts})", total=None)
        report = synthesize_suite(path, data_dir=data_dir(), engine_name=tts, workers=workers,
                                  progress=lambda d, n: bar.update(task, completed=d, total=n))
    speed = f", {report.speed:.1f} audio s per wall s" if report.speed else ""
    console.print(f"{report.clips} clips from {report.jobs} distinct lines: {report.synthesized} synthesised "
                  f"({report.audio_s:.0f} s of audio in {report.synth_wall_s:.1f} s on {report.workers} "
                  f"worker(s){speed}), {report.cached} from the cache")
