"""The figures of a corpus run, derived from its rows: files, hours of audio, time, acceptance, failures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Summary:
    """A corpus run at its end. Audio and decoding figures count the files transcribed in this run (a
    resumed file's time was spent in an earlier one); files, failures and total hours count them all."""

    files: int  # in the input
    transcribed: int  # decoded in this run
    resumed: int  # already in the output folder, or the same bytes under another path: not decoded
    failures: int  # error rows, this run's and resumed ones
    total_audio_hours: float  # every transcribed file, this run's and resumed ones
    audio_hours: float  # the files decoded in this run
    wall_seconds: float  # this run, start to end (Ray start and model loading included)
    num_generated: int  # tokens generated in this run (each needs one target pass without a draft)
    num_target_passes: int
    num_drafted: int
    num_accepted: int

    @property
    def real_time_factor(self) -> float | None:
        """Wall seconds per second of audio decoded in this run (below 1: faster than real time)."""
        return self.wall_seconds / (self.audio_hours * 3600) if self.audio_hours else None

    @property
    def audio_hours_per_hour(self) -> float | None:
        """Throughput: hours of audio decoded per hour of wall time."""
        return self.audio_hours * 3600 / self.wall_seconds if self.wall_seconds > 0 else None

    @property
    def acceptance_rate(self) -> float | None:
        return self.num_accepted / self.num_drafted if self.num_drafted else None

    @property
    def target_passes_saved(self) -> int:
        """Target passes the target alone would have made (one per generated token) minus those made."""
        return self.num_generated - self.num_target_passes

    def to_dict(self) -> dict:
        derived = ("real_time_factor", "audio_hours_per_hour", "acceptance_rate", "target_passes_saved")
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}

    def report(self) -> str:
        """A few readable lines."""
        rate = "n/a" if self.acceptance_rate is None else f"{self.acceptance_rate:.0%}"
        speed = "n/a" if self.real_time_factor is None else f"{self.real_time_factor:.3f}"
        throughput = "n/a" if self.audio_hours_per_hour is None else f"{self.audio_hours_per_hour:.1f}"
        saved = self.target_passes_saved / self.num_generated if self.num_generated else 0.0
        return "\n".join(
            [
                f"  {self.files} files: {self.transcribed} transcribed now, {self.resumed} already done, "
                f"{self.failures} failed; {self.total_audio_hours:.3f} h of audio transcribed in all",
                f"  this run: {self.audio_hours:.3f} h of audio in {self.wall_seconds:.1f} s, "
                f"real-time factor {speed} ({throughput} h of audio per hour)",
                f"  acceptance {rate}; {self.target_passes_saved} target passes saved ({saved:.0%} of "
                f"{self.num_generated} generated tokens)",
            ]
        )


def summarise(rows: Sequence[dict], made_now: Sequence[bool], wall_seconds: float) -> Summary:
    """The summary of a run's rows (one per input file); made_now: for each row, whether this run made it
    (decoded, or failed to read) rather than taking it from the output folder."""
    fresh = [row for row, now in zip(rows, made_now, strict=True) if now and row["error"] is None]
    done = [row for row in rows if row["error"] is None]

    def total(name: str) -> int:
        return sum(row["stats"][name] for row in fresh)

    return Summary(
        files=len(rows),
        transcribed=len(fresh),
        resumed=sum(not now for now in made_now),
        failures=sum(row["error"] is not None for row in rows),
        total_audio_hours=sum(row["duration_seconds"] for row in done) / 3600,
        audio_hours=sum(row["duration_seconds"] for row in fresh) / 3600,
        wall_seconds=wall_seconds,
        num_generated=total("num_generated"),
        num_target_passes=total("num_target_passes"),
        num_drafted=total("num_drafted"),
        num_accepted=total("num_accepted"),
    )
