"""Beam's DaskRunner (apache_beam.runners.dask, Beam 2.77) with the translation bugs that break hardpos fixed.

    python -m pipeline.run ... --runner=pipeline.runners.dask_runner.DaskRunner [--dask_client_address=HOST:PORT]

Every fix is a bug of Beam's runner, not of the stages, which stay runner-agnostic (design rule); each belongs
upstream in apache_beam/runners/dask/ and this module goes when Beam has them
(a reproduction of each: benchmarks/dask_repro.py, one case per fix):
1. Tagged outputs. Beam's ParDo translation (transform_evaluator.ParDo / apply_dofn_to_bundle) puts the main
   and every tagged output of a ParDo in one bag, and DaskBagVisitor looks an input up by its producer
   transform, not by the PCollection: every output of `.with_outputs(...)` holds all of them. Here a ParDo
   emits (tag, value) pairs and each output PCollection gets its own filtered bag.
2. Leaves. Beam's run_pipeline computes only the bag of the last transform visited; any other leaf (a sink
   whose result nobody reads: dead-letter files, samples) never runs. Here every PCollection that nothing
   reads is computed, all as one dask collection (dask.optimize or compute of several collections optimises
   each on its own and runs their shared upstream tasks once per collection).
3. finish_bundle. Beam's apply_dofn_to_bundle collects the outputs before invoke_finish_bundle, so what a
   DoFn emits there (the last batch of BatchElements) is lost; its output list and DoFn instance are built
   once with the graph, shared by every bundle that runs from the same deserialised copy. Here each bundle
   collects into its own list, after finish_bundle; the DoFn a worker thread ran last runs its next bundle of
   that DoFn too (setup, a spaCy load, is not paid per partition).
4. Side inputs. Beam's runner materialises a side input inside each consuming task with a nested compute of
   its whole upstream graph (re-running it per task). Here the side input is one node of the same graph,
   handed to the consuming tasks as a dependency.
5. Reshuffle. Beam's override makes it a no-op, so the records read from one file stay in one partition and
   everything after the read runs as one task on one worker. Here it repartitions the bag over twice the
   cluster's threads.
6. wait_until_finish(duration) raises TimeoutError (and marks the run FAILED) when the run outlasts the
   duration; the PipelineResult contract is to return the current state (progress.poll_metrics waits so, a
   few seconds at a time). Here it returns RUNNING. And the client (with the LocalCluster it starts when no
   --dask_client_address is given) is never closed: its worker processes live on until the launcher exits,
   one cluster more for each stage of --stage=all. Here it is closed once the run ends.
7. Create. Beam's translation puts up to 128 elements in one partition (its new default size), so a Create of a
   corpus's read units (a Parquet row group, a JSONL range, a file each) is read by one task, which holds every
   record it reads: a worker's memory grows with the corpus (at 591,753 captions the nanny restarted 2 GiB
   workers over and over). Here a Create of up to CREATE_SPREAD_MAX elements is a partition per element, so a
   task holds one unit's records (--dask_npartitions / --dask_partition_size still decide when given).
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import os
import threading

import apache_beam as beam
from apache_beam import DoFn, pvalue
from apache_beam.internal import pickler
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, Receiver, _OutputHandler
from apache_beam.runners.dask import dask_runner as beam_dask
from apache_beam.runners.dask import overrides as dask_overrides_module
from apache_beam.runners.dask import transform_evaluator as te
from apache_beam.runners.dask.overrides import dask_overrides
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms.sideinputs import SideInputMap

DaskOptions = beam_dask.DaskOptions  # --dask_client_address etc.; defined here too so the flags are known
CREATE_SPREAD_MAX = 4096  # a Create this long or shorter: one partition per element (fix 7)


class _Collect(Receiver):
    def __init__(self, tag, out: list):
        self.tag, self.out = tag, out

    def receive(self, windowed_value):
        self.out.append((self.tag, windowed_value.value))


class _Receivers(dict):
    def __init__(self, out: list):
        super().__init__()
        self.out = out

    def __missing__(self, tag):
        self[tag] = _Collect(tag, self.out)
        return self[tag]


def _run_bundle(items, fn_bytes, window_fn, label, args, kwargs, side_specs, *side_values):
    """One Dask partition = one bundle: (tag, value) for every output, main output tagged None."""
    out: list = []
    receivers = _Receivers(out)
    handler = _OutputHandler(window_fn=window_fn, main_receivers=receivers[None], tagged_receivers=receivers,
                             per_element_output_counter=None, output_batch_converter=None,
                             process_yields_batches=False, process_batch_yields_elements=False)
    side_inputs = [
        SideInputMap(view_class, view_options, [te.get_windowed_value(v, mapping_fn) for v in values])
        for (view_class, view_options, mapping_fn), values in zip(side_specs, side_values)]
    signature, fresh = _set_up_dofn(fn_bytes)
    invoker = DoFnInvoker.create_invoker(
        signature, handler, context=DoFnContext(label, state=None),
        side_inputs=side_inputs, input_args=args, input_kwargs=kwargs, user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam())
    if fresh:
        invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(te.get_windowed_value(item, window_fn))
    invoker.invoke_finish_bundle()
    return out


_DOFNS = threading.local()  # per worker thread: the DoFn it ran last (a DoFn instance runs one bundle at a time)


def _set_up_dofn(fn_bytes: bytes) -> tuple[DoFnSignature, bool]:
    """(the DoFn's signature, whether it is new and needs setup): the DoFn a worker thread ran last is reused for
    its next bundle of the same DoFn, as Beam's runners reuse theirs, instead of a spaCy pipeline loaded per
    partition (25,000 captions: 404 s -> 147 s). Only the last one is kept: every DoFn kept would hold its own spaCy
    and WordNet between tasks. Teardown is best-effort in Beam's contract and hardpos's DoFns have none."""
    key = hashlib.sha256(fn_bytes).digest()
    last = getattr(_DOFNS, "last", None)
    if last is not None and last[0] == key:
        return last[1], False
    _DOFNS.last = None  # the earlier one goes before the next is set up
    _DOFNS.last = (key, DoFnSignature(pickler.loads(fn_bytes)))
    return _DOFNS.last[1], True


def _all_values(parts):
    return list(itertools.chain.from_iterable(parts))


def _select(pairs, tag):
    return [value for t, value in pairs if t == tag]


def _nothing(_partition):
    return []


def _pardo_outputs(node, input_bag, side_bags) -> dict:
    """{output PCollection: bag} for a ParDo node."""
    transform = node.transform
    args, kwargs = transform.raw_side_inputs
    main_input = next(iter(node.main_inputs.values()))
    window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
    side_specs = [(type(si), si._view_options(), si._window_mapping_fn) for si in node.side_inputs]
    # Each side input is one node of the graph that the consuming tasks depend on. Not an Item argument: dask
    # optimises an Item argument's graph on its own, which gives its upstream tasks new keys and runs them twice.
    side_items = [bag.reduction(list, _all_values).to_delayed(optimize_graph=False) for bag in side_bags]
    # named by the transform's label (the key's prefix), so that a worker's running task says which step it is
    pairs = input_bag.map_partitions(_run_bundle, pickler.dumps(transform.fn), window_fn, transform.label,
                                     list(args), kwargs, side_specs, *side_items, token=f"pardo-{node.full_label}")
    return {pcoll: pairs.map_partitions(_select, tag) for tag, pcoll in node.outputs.items()}


class _Visitor(beam.pipeline.PipelineVisitor):
    """Beam's DaskBagVisitor, keyed by PCollection instead of producer transform."""

    def __init__(self, bag_kwargs: dict, spread: int):
        self.bag_kwargs = bag_kwargs
        self.spread = spread
        self.bags: dict = {}  # PCollection -> dask Bag
        self.consumed: set = set()  # PCollections read by a transform (as main or side input)

    def visit_transform(self, node) -> None:
        self.consumed.update(node.inputs, (si.pvalue for si in node.side_inputs))
        inputs = [None if isinstance(p, pvalue.PBegin) else self.bags[p] for p in node.inputs]
        if node.transform.__class__ is beam.ParDo:
            self.bags.update(_pardo_outputs(node, inputs[0], [self.bags[si.pvalue] for si in node.side_inputs]))
            return
        if node.transform.__class__ is dask_overrides_module._Reshuffle:
            # Beam's override makes Reshuffle a no-op: the records of one input file stay in the one partition
            # that read it, and one worker does all the work after it.
            spread = inputs[0].repartition(npartitions=max(inputs[0].npartitions, self.spread))
            self.bags.update({pcoll: spread for pcoll in node.outputs.values()})
            return
        if node.transform.__class__ is te._Create and not self.bag_kwargs:
            import dask.bag as db

            values = list(node.transform.values)
            size = 1 if len(values) <= CREATE_SPREAD_MAX else 128
            bag = db.from_sequence(values, partition_size=size) if values else db.from_sequence([], npartitions=1)
            self.bags.update({pcoll: bag for pcoll in node.outputs.values()})
            return
        op = te.TRANSLATIONS.get(node.transform.__class__, te.NoOp)(node, bag_kwargs=self.bag_kwargs)
        bag = op.apply(input_bag=inputs if isinstance(op, te.Flatten) else (inputs[0] if inputs else None))
        for pcoll in node.outputs.values():
            self.bags[pcoll] = bag


class _Result(beam_dask.DaskRunnerResult):
    def wait_until_finish(self, duration=None) -> str:
        if PipelineState.is_terminal(self._state):
            return self._state
        try:
            state = super().wait_until_finish(duration)
        except TimeoutError:
            if duration is None:
                raise
            self._state = PipelineState.RUNNING  # still running: progress.poll_metrics asks every few seconds
            return self._state
        except BaseException:
            self.client.close()
            raise
        self.client.close()  # and the LocalCluster it started, if it started one
        return state


class DaskRunner(beam_dask.DaskRunner):
    """Beam's DaskRunner with fixes 1-7 above; same options."""

    def run_pipeline(self, pipeline, options):
        import dask
        import dask.bag as db
        import dask.distributed as ddist

        from pipeline.options import HardposOptions

        # Dask's scheduler and workers log each start-up step at INFO (a local cluster: 67 lines for a sample run)
        level = getattr(options.view_as(HardposOptions), "dask_log_level", None) or "WARNING"
        logging.getLogger("distributed").setLevel(level)
        # Beam's note that its default partition size changed, once per Create: not ours to act on
        logging.getLogger("apache_beam.runners.dask.transform_evaluator").setLevel(logging.ERROR)
        os.environ["DASK_LOGGING__DISTRIBUTED"] = level.lower()  # the worker processes read it as they start
        dask_options = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
        bag_kwargs = DaskOptions._extract_bag_kwargs(dask_options)
        if "address" not in dask_options and "scheduler_file" not in dask_options:
            # a local cluster for this run only: no dashboard server (its port may be another run's, and a batch
            # run has no one looking at it); worker processes of one thread (our DoFns hold a spaCy pipeline
            # each), as many and with as much memory as asked
            hardpos = options.view_as(HardposOptions)
            dask_options.update(dashboard_address=None, threads_per_worker=1,
                                memory_limit=getattr(hardpos, "dask_memory_limit", None) or "auto")
            if getattr(hardpos, "dask_workers", 0):
                dask_options["n_workers"] = hardpos.dask_workers
        try:
            # a local cluster is this run's own, whatever scheduler dask's config (DASK_SCHEDULER_ADDRESS) names
            local = "address" not in dask_options and "scheduler_file" not in dask_options
            with dask.config.set({"scheduler-address": None, "scheduler-file": None} if local else {}):
                client = ddist.Client(**dask_options)
        except (OSError, TypeError, ValueError) as e:  # nothing answering, a tls:// address without its security
            # settings (TypeError), a cluster that could not start: one line
            from pipeline.options import UsageError

            where = dask_options.get("address") or dask_options.get("scheduler_file")
            raise UsageError(f"Dask: no cluster to run on ({f'nothing answered at {where}: ' if where else ''}"
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        pipeline.replace_all(dask_overrides())
        # Reshuffle spreads over twice the cluster's threads (a few tasks per thread balance uneven ones).
        visitor = _Visitor(bag_kwargs, spread=2 * max(1, sum(client.nthreads().values())))
        pipeline.visit(visitor)
        sinks = {id(b): b for p, b in visitor.bags.items() if p not in visitor.consumed and b is not None}
        everything = db.concat([b.map_partitions(_nothing) for b in sinks.values()])
        return _Result(client, [client.compute(everything)])
