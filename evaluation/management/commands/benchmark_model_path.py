"""A cheaper model path judged by quality, not by vectors (issue 28, target 3).

For the float ONNX model (the default) and its int8 quantization: the time a question takes,
measured side by side (alternating, one question each, the same questions), and the quality
a scope would get — each model's embedding threshold fitted on the fit split to the default
2 % bound (as calibrate_thresholds does), then correct and false hits on the validation split,
which neither fit saw, with 95 % Clopper-Pearson intervals. The cheaper path is good enough
when both of its validation rates lie inside the float model's intervals.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from django.core.management.base import BaseCommand

from evaluation import matching
from evaluation.management.commands.benchmark_matching import interval_row
from evaluation.matching import DEFAULT_PAIRS
from evaluation.timing import save_figures
from trails.embedders import PrecomputedEmbedder, onnx, onnx_int8, serving

MODELS = {"float32": onnx.Embedder, "int8": onnx_int8.Embedder}


class Command(BaseCommand):
    help = "Prints ms a question and validation-split correct/false hits at a fitted threshold for the float and int8 models."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--pairs", default=str(DEFAULT_PAIRS))
        parser.add_argument("--limit", type=int, default=0, help="use only the first N pairs")
        parser.add_argument("--timed", type=int, default=600, help="questions timed on each model")
        parser.add_argument("--json", dest="json_path", type=Path)

    def handle(self, *args, pairs: str, limit: int, timed: int, json_path: Path | None, **options) -> None:
        data = matching.load_pairs(Path(pairs), limit)
        texts = sorted({p["a"] for p in data} | {p["b"] for p in data})
        models = {name: make() for name, make in MODELS.items()}
        figures: dict = {"pairs": len(data), "models": {}}

        # Speed: one question at a time, alternating models, so both see the same minutes.
        asked = [p["b"] for p in data[:timed]]
        for model in models.values():
            model.embed_many(asked[:20])
        spent: dict[str, list[float]] = {name: [] for name in models}
        for text in asked:
            for name, model in models.items():
                started = time.perf_counter()
                model.embed_many([text])
                spent[name].append((time.perf_counter() - started) * 1000.0)
        for name in models:
            figures["models"][name] = {"ms_per_question_p50": round(statistics.median(spent[name]), 3)}
        speedup = statistics.median(spent["float32"]) / statistics.median(spent["int8"])
        figures["speedup_p50"] = round(speedup, 2)
        self.stdout.write(
            f"one question, median of {len(asked)} alternating: float32 {statistics.median(spent['float32']):.2f} ms, "
            f"int8 {statistics.median(spent['int8']):.2f} ms: int8 {speedup:.2f}x faster"
        )

        for name, model in models.items():
            started = time.perf_counter()
            with serving(PrecomputedEmbedder(model, texts)):
                fitted = matching.fit_thresholds(data)["matchers"]["embedding"]
                point = matching.defaults(data, "embedding", embedding_threshold=fitted["threshold"])
            figures["models"][name].update(
                {
                    "threshold": fitted["threshold"],
                    "fit_false_upper": fitted["false_upper"],
                    "validation": point["validation"],
                    "fit": point["fit"],
                }
            )
            self.stdout.write(
                f"{name}: threshold {fitted['threshold']} fitted on the fit split ({time.perf_counter() - started:.0f} s); "
                f"validation split: {interval_row(point['validation'])}"
            )
        base, cheap = figures["models"]["float32"]["validation"], figures["models"]["int8"]["validation"]
        inside = {
            rate: base[f"{rate}_ci"][0] <= cheap[f"{rate}_rate"] <= base[f"{rate}_ci"][1]
            for rate in ("correct", "false")
        }
        figures["int8_inside_float32_intervals"] = inside
        self.stdout.write(
            f"int8's validation rates inside float32's 95 % intervals: correct hits {inside['correct']}, "
            f"false hits {inside['false']}; speed {speedup:.2f}x"
        )
        save_figures(json_path, figures)
