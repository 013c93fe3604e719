"""Heterogeneous graphs end to end: typed nodes and edges, typed splits, HeteroData models.

The same stages run as for homogeneous graphs; each stage's command dispatches here when the
prepared artifacts say the graph is heterogeneous (``data/prepared/hetero.json``, see
``gnnpipe.io.hetero``). Node ids are local to their type everywhere (paper 0 and author 0 are
different nodes); an edge type is a ``(src_type, relation, dst_type)`` triple as in PyG, named
``src__relation__dst`` in file names. Modules:

  graph      ``HeteroGraph`` (per-type features, per-edge-type CSR), homogeneous projection
  synthetic  the built-in papers / authors / venues graph (``dataset.synthetic.hetero: true``)
  split      typed node split of the target type; link split of one edge type with its reverse
  audit      the split audit, per node type and per edge type
  models     ``to_hetero(GraphSAGE)``, HGT (``HGTConv``), R-GCN (``RGCNConv``) and per-type MLPs
  stages     the stage glue of the heterogeneous path (called by ``gnnpipe/commands/*.py``)
"""
