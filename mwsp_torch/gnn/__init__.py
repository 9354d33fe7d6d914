"""GNN inputs from MWSP's canonical tree IDs, and the GIN and structure-agnostic models on them.

The hybrid "GIN on tree IDs" feeds a GIN learned embeddings of each node's canonical trees
at scales ``0..k`` (:class:`mwsp_torch.TreeIDs`) instead of its label alone. Honesty needs
the embedding's vocabulary to come from the training graphs only: :class:`TreeIDVocabulary`
is fitted on them, maps each scale's trees seen there to ``1..V_s``, and every other tree to
index 0, :data:`UNSEEN`, one shared "unseen" embedding; so no test graph shapes what is
learned. Scale 0 trees are the node labels themselves (or degrees, on unlabelled graphs), so
the same vocabulary at ``k=0`` gives the plain GIN and the structure-agnostic baseline their
one-hot labels (:class:`OneHotLabels`), as Errica et al. (2020) feed them.

The models are PyG's own layers (``GINConv``, ``global_add_pool``/``global_mean_pool``):

- :class:`GIN` (Xu et al. 2019, as in Errica et al.'s ``GIN``): GIN layers with a
  two-layer MLP each, a readout of every layer's node states (the input's too), each read
  out graph-wise and mapped to class scores by its own linear layer, the scores summed.
- :class:`Baseline`: Errica et al.'s structure-agnostic baseline: the sum (readout) of the
  node inputs, then an MLP; it sees no edges.

:func:`train_classifier` trains either with Adam on cross-entropy and early stopping on a
validation set's accuracy (ties: its loss), as Errica et al. select; :func:`graph_embeddings`
gives a trained GIN's graph embeddings of new graphs. (The comparison's fusion,
:mod:`mwsp_torch.compare.fusion`, fuses MWSP's kernel with cross-fitted class probabilities.)

Errica et al.'s own models and training, for :mod:`mwsp_torch.gnn_protocol`:

- :func:`errica_node_features`: their node inputs (one-hot labels, continuous attributes
  beside them where the dataset has some, one-hot degrees on unlabelled graphs).
- :class:`ErricaGIN`, :class:`MolecularFingerprint`, :class:`DeepMultisets`: their GIN and
  their two structure-agnostic baselines (``models/graph_classifiers/`` of
  diningphil/gnn-comparison), on plain tensors ``(x, edge_index, batch, num_graphs)``.
- :class:`PackedGraphs`: graphs collated once into one set of tensors; a mini-batch is
  gathered from it by index (a few tensor ops, no per-graph Python), so an epoch costs the
  model's arithmetic and not PyG's ``Batch.from_data_list`` per step.
- :func:`fit_classifier`: Adam with their optional ``StepLR`` and their ``Patience`` early
  stopper (on validation accuracy or loss), keeping the best epoch's weights.

The package's modules: :mod:`~mwsp_torch.gnn.inputs` (node inputs),
:mod:`~mwsp_torch.gnn.models` (the networks), :mod:`~mwsp_torch.gnn.training` (training and
scoring).
"""

from mwsp_torch.gnn.inputs import (
    OneHotLabels,
    TreeIDEmbedding,
    TreeIDVocabulary,
    errica_node_features,
    tree_id_features,
    tree_id_inputs,
)
from mwsp_torch.gnn.models import (
    GIN,
    READOUTS,
    TEMPLATE_POOLINGS,
    Baseline,
    DeepMultisets,
    ErricaGIN,
    GINTemplatePooling,
    MolecularFingerprint,
    graph_readout,
)
from mwsp_torch.gnn.training import (
    MONITORS,
    GraphBatch,
    PackedGraphs,
    Patience,
    accuracy,
    evaluate,
    fit_classifier,
    graph_embeddings,
    predict,
    train_classifier,
)

__all__ = [
    "graph_readout",
    "Baseline",
    "DeepMultisets",
    "ErricaGIN",
    "GIN",
    "GINTemplatePooling",
    "GraphBatch",
    "MONITORS",
    "MolecularFingerprint",
    "OneHotLabels",
    "PackedGraphs",
    "Patience",
    "READOUTS",
    "TEMPLATE_POOLINGS",
    "TreeIDEmbedding",
    "TreeIDVocabulary",
    "accuracy",
    "errica_node_features",
    "evaluate",
    "fit_classifier",
    "graph_embeddings",
    "predict",
    "train_classifier",
    "tree_id_features",
    "tree_id_inputs",
]
