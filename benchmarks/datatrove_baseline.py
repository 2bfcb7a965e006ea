"""The Hugging Face datatrove baseline of `ingest_throughput.py` (runs in the environment
`make_datatrove_env.sh` builds, never in the project's).

Stages, as datatrove's own examples chain them, on a directory of .jsonl files:

    1  JsonlReader -> GopherRepetitionFilter -> GopherQualityFilter -> JsonlWriter + MinhashDedupSignature
    2  MinhashDedupBuckets      3  MinhashDedupCluster
    4  JsonlReader (stage 1's output) -> MinhashDedupFilter -> JsonlWriter

Prints one JSON object: seconds per stage and in total, documents in and out.

    python benchmarks/datatrove_baseline.py --input DIR --work DIR [--workers 1]
"""

import argparse
import json
import os
import time

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup import MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature
from datatrove.pipeline.dedup.minhash import MinhashConfig
from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter


def _count_lines(directory: str) -> int:
    import gzip

    total = 0
    for root, _, names in os.walk(directory):
        for name in names:
            opener = gzip.open if name.endswith(".gz") else open
            with opener(os.path.join(root, name), "rt", encoding="utf-8") as handle:
                total += sum(1 for _ in handle)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    tasks = len([name for name in os.listdir(args.input) if name.endswith(".jsonl")])
    config = MinhashConfig()  # 5-gram shingles, 14 buckets x 8 hashes
    folder = lambda name: os.path.join(args.work, name)
    stages = {
        "read_filter_signature": LocalPipelineExecutor(
            pipeline=[
                JsonlReader(args.input),
                GopherRepetitionFilter(),
                GopherQualityFilter(),
                JsonlWriter(folder("filtered")),
                MinhashDedupSignature(output_folder=folder("signatures"), config=config),
            ],
            tasks=tasks,
            workers=args.workers,
            logging_dir=folder("logs/1"),
        ),
        "buckets": LocalPipelineExecutor(
            pipeline=[
                MinhashDedupBuckets(input_folder=folder("signatures"), output_folder=folder("buckets"), config=config),
            ],
            tasks=config.num_buckets,
            workers=args.workers,
            logging_dir=folder("logs/2"),
        ),
        "cluster": LocalPipelineExecutor(
            pipeline=[
                MinhashDedupCluster(input_folder=folder("buckets"), output_folder=folder("remove_ids"), config=config),
            ],
            tasks=1,
            logging_dir=folder("logs/3"),
        ),
        "dedup_filter": LocalPipelineExecutor(
            pipeline=[
                JsonlReader(folder("filtered")),
                MinhashDedupFilter(input_folder=folder("remove_ids")),
                JsonlWriter(folder("output")),
            ],
            tasks=tasks,
            workers=args.workers,
            logging_dir=folder("logs/4"),
        ),
    }
    seconds = {}
    for name, executor in stages.items():
        start = time.perf_counter()
        executor.run()
        seconds[name] = time.perf_counter() - start
    print(
        json.dumps(
            {
                "seconds": seconds,
                "total_s": sum(seconds.values()),
                "workers": args.workers,
                "documents_in": _count_lines(args.input),
                "documents_after_filters": _count_lines(folder("filtered")),
                "documents_out": _count_lines(folder("output")),
            }
        )
    )


if __name__ == "__main__":
    main()
