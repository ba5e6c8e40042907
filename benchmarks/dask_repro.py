"""Beam's DaskRunner does not separate the outputs of a multi-output ParDo (Beam 2.77, for an upstream report).

    python benchmarks/dask_repro.py DirectRunner                                        # OK, exit 0
    python benchmarks/dask_repro.py apache_beam.runners.dask.dask_runner.DaskRunner     # WRONG, exit 1
        [--dask_client_address=tcp://127.0.0.1:8786]    (default: a LocalCluster of worker processes)

Every consumer of any output of `ParDo(...).with_outputs(...)` gets the main AND all tagged outputs:
apache_beam/runners/dask/transform_evaluator.py:198 (apply_dofn_to_bundle) returns the values of every
receiver, whatever its tag, as the one bag of the ParDo, and dask_runner.py:192-194 (DaskBagVisitor) gives a
consumer `self.bags[input_value.producer]`, the bag of the producing transform, never of the tagged PCollection.
A Flatten of two outputs of one ParDo therefore gets everything twice.
"""
import glob
import os
import sys
import tempfile
import uuid

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions


class Split(beam.DoFn):
    def process(self, n):
        if n % 2:
            yield beam.pvalue.TaggedOutput("odd", {"n": n})  # like our dead letters: a dict on a tagged output
        else:
            yield (f"file{n}", n)  # like our read counts: a tuple on the main output


def record(labelled, directory):  # the one leaf, applied last (the DaskRunner computes only the last transform)
    with open(os.path.join(directory, uuid.uuid4().hex), "w") as f:
        f.write(repr(labelled))


if __name__ == "__main__":
    out_dir = tempfile.mkdtemp(prefix="dask-repro-")
    with beam.Pipeline(sys.argv[1], options=PipelineOptions(sys.argv[2:])) as p:
        split = p | beam.Create(range(4)) | beam.ParDo(Split()).with_outputs("odd", main="even")
        both = (split.even, split.odd) | "Both" >> beam.Flatten()
        _ = ((split.even | "E" >> beam.Map(lambda x: ("even", x)),
              split.odd | "O" >> beam.Map(lambda x: ("odd", x)),
              both | "B" >> beam.Map(lambda x: ("flatten(even, odd)", x)))
             | beam.Flatten() | beam.Map(record, out_dir))
    got = {}
    for path in glob.glob(os.path.join(out_dir, "*")):
        label, value = eval(open(path).read())
        got.setdefault(label, []).append(value)
    for label in ("even", "odd", "flatten(even, odd)"):
        print(f"{label:>20}: {sorted(got.get(label, []), key=repr)}")
    ok = (sorted(got.get("even", []), key=repr) == [("file0", 0), ("file2", 2)]
          and sorted(got.get("odd", []), key=repr) == [{"n": 1}, {"n": 3}]
          and len(got.get("flatten(even, odd)", [])) == 4)
    print("OK" if ok else "WRONG: tagged outputs are mixed")
    sys.exit(0 if ok else 1)
