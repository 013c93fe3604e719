"""The sampler table (gnnpipe/config/samplers.py): it names every train.sampler value, and its
``check`` raises the one-line params errors of the sampler rules."""

from __future__ import annotations

import dataclasses
import typing
from types import SimpleNamespace

import pytest

from gnnpipe.config import (ClusterParams, DatasetParams, DistParams, NeighborParams, ParamsError,
                            PartitionParams, TemporalParams, TrainParams, samplers)


def _params(task="node", typed=False, weight="", partition=PartitionParams(), **train):
    """A duck-typed Params (no load-time rules run) with what ``samplers.check`` reads."""
    base = DatasetParams()
    dataset = DatasetParams(task=task, layout="typed" if typed else "homogeneous",
                            edges=dataclasses.replace(base.edges, weight=weight))
    return SimpleNamespace(dataset=dataset, train=TrainParams(**train), partition=partition)


def test_table_has_one_entry_per_sampler_value_and_sections_exist():
    values = typing.get_args(typing.get_type_hints(TrainParams)["sampler"])
    assert set(samplers.SAMPLERS) == set(values)
    fields = {f.name for f in dataclasses.fields(TrainParams)}
    for entry in samplers.SAMPLERS.values():
        assert not entry.section or entry.section in fields, entry.name
        assert set(entry.ddp) <= set(entry.runs), entry.name
        assert entry.engines[0] == "plain"
        # a batch drawn around seed nodes trains node tasks, around supervision edges link tasks
        tasks = {task for task, _ in entry.runs}
        assert {"seeds": {"node"}, "edges": {"link"}}.get(entry.around, tasks) == tasks, entry.name


def test_every_sampler_with_a_loader_has_a_builder_for_each_graph_kind_it_runs_on():
    from gnnpipe.sampling.builders import BUILDERS

    expected = {(s.name, kind) for s in samplers.SAMPLERS.values() if s.loader for _, kind in s.runs}
    assert set(BUILDERS) == expected


def test_lookups_read_the_table():
    assert samplers.names("node", "typed") == ("full", "hgt", "neighbor")
    assert samplers.names("link", "homogeneous") == ("full", "sign", "link_neighbor")
    assert samplers.names("node", "homogeneous", "lightning") == ("full", "neighbor")
    assert samplers.with_option("time") == ("neighbor", "shadow")
    assert samplers.needs("cluster", "partition") and samplers.needs("sign", "propagate")
    assert not samplers.needs("neighbor", "partition")
    assert samplers.runs("link_neighbor", "link", "typed")
    assert not samplers.runs("shadow", "link", "homogeneous")
    rows = samplers.doc_rows()
    assert [r[0] for r in rows] == list(samplers.SAMPLERS)


def test_out_of_core_is_the_mapped_rows_sampler_on_one_graph_with_the_plain_loop():
    assert samplers.out_of_core(TrainParams(sampler="neighbor"))
    assert not samplers.out_of_core(TrainParams(sampler="full"))
    assert not samplers.out_of_core(TrainParams(sampler="neighbor", engine="lightning"))
    assert not samplers.out_of_core(TrainParams(sampler="neighbor",
                                             dist=DistParams(shard="partition")))


@pytest.mark.parametrize("params", [
    _params(), _params(sampler="neighbor"),
    _params(sampler="shadow", temporal=TemporalParams(by="node")),
    _params(typed=True, sampler="hgt", model="hgt"), _params(typed=True, sampler="neighbor",
                                                             model="rgcn"),
    _params(task="link", sampler="link_neighbor", dist=DistParams(nproc=2)),
    _params(sampler="cluster", dist=DistParams(shard="partition")),
    _params(sampler="neighbor", weight="w", neighbor=NeighborParams(weighted=True)),
    _params(sampler="neighbor", engine="lightning"),
])
def test_valid_combinations_pass(params):
    samplers.check(params)


@pytest.mark.parametrize("params, message", [
    (_params(model="sign"), r"train.model='sign' with train.sampler='full': the sign model"),
    (_params(sampler="sign"), r"use train.model=sign together with train.sampler=sign"),
    (_params(model="hgt"), r"train.model='hgt' needs a heterogeneous graph"),
    (_params(sampler="hgt"), r"train.sampler='hgt' samples typed node budgets"),
    (_params(typed=True, model="gcn"), r"train.model='gcn' is not available for heterogeneous"),
    (_params(typed=True, sampler="cluster"),
     r"train.sampler='cluster' is not available for heterogeneous graphs with dataset.task=node "
     r"yet; use one of: full, hgt, neighbor"),
    (_params(sampler="link_neighbor"), r"train.sampler='link_neighbor' samples around "
     r"supervision edges and needs dataset.task=link \(found 'node'\)"),
    (_params(task="link", sampler="shadow"),
     r"train.sampler='shadow' samples around labelled seed nodes"),
    (_params(task="link", sampler="cluster"), r"train.sampler='cluster' is not available for "
     r"dataset.task=link; use one of: full, sign, link_neighbor"),
    (_params(sampler="cluster", model="hgt", partition=PartitionParams()),
     r"train.model='hgt' needs a heterogeneous graph"),
    (_params(typed=True, dist=DistParams(nproc=2)), r"> 1 on heterogeneous graphs with "
     r"dataset.task=node needs train.sampler=neighbor \(found 'full'\)"),
    (_params(task="link", dist=DistParams(nproc=2)), r"> 1 with dataset.task=link needs "
     r"train.sampler=link_neighbor \(found 'full'\): the full-graph step"),
    (_params(sampler="neighbor", num_layers=3), r"train.neighbor.num_neighbors=\[15, 10\] has 2 "
     r"hops but train.num_layers=3: give one fan-out per layer"),
    (_params(typed=True, sampler="hgt", num_layers=3), r"train.hgt.num_samples=\[512, 512\] has "
     r"2 hops but train.num_layers=3: give one node budget per layer"),
    (_params(temporal=TemporalParams(by="edge")), r"train.temporal.by='edge' with "
     r"train.sampler='full': .* use train.sampler=neighbor or shadow"),
    (_params(sampler="neighbor", neighbor=NeighborParams(weighted=True)),
     r"needs train.sampler=neighbor \(found 'neighbor'\), dataset.edges.weight set \(found ''\)"),
    (_params(sampler="saint", dist=DistParams(shard="partition")),
     r"train.dist.shard='partition' with train.sampler='saint': .* use train.sampler=cluster"),
    (_params(sampler="saint", engine="lightning"), r"train.engine='lightning' supports .* "
     r"train.sampler full or neighbor, .*found train.sampler='saint'"),
    (_params(task="link", sampler="link_neighbor", engine="lightning"),
     r"found dataset.task='link'"),
    (_params(sampler="cluster", cluster=ClusterParams(parts_per_batch=9),
             partition=PartitionParams(num_parts=4)),
     r"train.cluster.parts_per_batch=9 exceeds partition.num_parts=4"),
    (_params(sampler="cluster", cluster=ClusterParams(keep_inter_cluster_edges=True),
             dist=DistParams(shard="partition")),
     r"keep_inter_cluster_edges=true needs the whole train graph"),
])
def test_check_raises_one_line_naming_the_keys(params, message):
    with pytest.raises(ParamsError, match=message) as err:
        samplers.check(params)
    assert "\n" not in str(err.value)
