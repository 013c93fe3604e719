"""Heterogeneous graphs: typed splits, audits, samplers and HeteroData models (library only).

The same stages run as for homogeneous graphs, which the stage commands read as typed graphs of
one type (``gnnpipe/io/typed.py``); a graph is typed when the node and edge types of
``data/prepared/graph.json`` and ``data/split/meta.json`` say so. Node ids are
local to their type everywhere (paper 0 and author 0 are different nodes); an edge type is a
``(src_type, relation, dst_type)`` triple as in PyG, named ``src__relation__dst`` in file
names. The ``Graph`` itself is a base type in ``gnnpipe/data/graph.py``. Modules:

  split      typed node split of the target type; link split of one edge type with its reverse
  audit      the split audit, per node type and per edge type
  inputs     per-phase model inputs (x_dict, edge_index_dict)
  loader     HGT per-type budget mini-batches (``train.sampler: hgt``)
  models     the multi-type models: ``to_hetero(GraphSAGE)``, HGT (``HGTConv``), R-GCN
             (``RGCNConv``); the typed ``mlp`` and layer-wise inference serve every graph
             (``gnnpipe/training/models.py``, ``gnnpipe/training/inference.py``)
"""
