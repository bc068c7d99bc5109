import pickle
from collections import defaultdict

import numpy as np
import pytest
import scipy.sparse as sp

from commgraph.errors import GraphFormatError
from commgraph.graph import load_graph, load_planetoid


def test_real_cora_matches_pyg_reader(planetoid_dir):
    from torch_geometric.io.planetoid import read_planetoid_data

    g = load_graph(planetoid_dir, name="cora")
    ref = read_planetoid_data(str(planetoid_dir), "cora")
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (2708, 10556, 1433, 7)
    src, dst = g.edge_list()
    ei = ref.edge_index.numpy()
    order = np.lexsort((ei[0], ei[1]))
    assert np.array_equal(ei[0][order], src) and np.array_equal(ei[1][order], dst)
    assert np.array_equal(ref.x.numpy(), g.features)
    assert np.array_equal(ref.y.numpy(), g.labels)
    for mask in ("train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(ref, mask).numpy(), getattr(g, mask))
    assert [int(g.train_mask.sum()), int(g.val_mask.sum()), int(g.test_mask.sum())] == [140, 500, 1000]


def test_path_forms_detect_planetoid(planetoid_dir):
    for path in (planetoid_dir, planetoid_dir / "ind.cora", planetoid_dir / "ind.cora.x"):
        assert load_graph(path).num_nodes == 2708


def test_bundled_cora_equals_raw_files(planetoid_dir):
    assert load_graph("cora").equals(load_planetoid(planetoid_dir, "cora"))


def write_planetoid(folder, name, *, n_train=2, n_val_extra=0, test_index=(7, 5, 9), features=3, classes=3):
    """A Planetoid dataset written the way the original files are: pickled csr_matrix/ndarray/dict.
    With test ids 5, 7, 9 (6 and 8 missing) it has CiteSeer's gaps."""
    rng = np.random.default_rng(0)
    n_all = n_train + n_val_extra + 3  # "allx" covers train + val + unlabelled-by-split nodes
    test_index = np.array(test_index)
    x_all = rng.integers(0, 2, (n_all, features)).astype(np.float32)
    tx = rng.integers(0, 2, (len(test_index), features)).astype(np.float32)
    y_all = np.eye(classes)[np.arange(n_all) % classes]
    ty = np.eye(classes)[np.arange(len(test_index)) % classes]
    graph = defaultdict(list, {0: [1, 5], 1: [0], 5: [0, 9], 9: [5], 7: []})
    objects = {
        "x": sp.csr_matrix(x_all[:n_train]),
        "y": y_all[:n_train],
        "tx": sp.csr_matrix(tx),
        "ty": ty,
        "allx": sp.csr_matrix(x_all),
        "ally": y_all,
        "graph": graph,
    }
    for part, obj in objects.items():
        with open(folder / f"ind.{name}.{part}", "wb") as handle:
            pickle.dump(obj, handle, protocol=2)
    (folder / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_index))
    return x_all, tx, test_index


def test_citeseer_style_gaps_give_isolated_unlabelled_nodes(tmp_path):
    x_all, tx, test_index = write_planetoid(tmp_path, "citeseer")
    g = load_planetoid(tmp_path, "citeseer")
    # nodes 0..4 from allx, test ids span 5..9 with 6 and 8 absent from tx
    assert g.num_nodes == 10
    assert np.array_equal(g.features[:5], x_all)
    assert np.array_equal(g.features[test_index], tx)
    assert not g.features[[6, 8]].any()
    assert g.labels[[6, 8]].tolist() == [-1, -1]
    assert np.flatnonzero(g.test_mask).tolist() == sorted(test_index.tolist())
    assert np.flatnonzero(g.train_mask).tolist() == [0, 1]
    # PyG's rule: val = the 500 ids after the training ids, minus nodes without a label
    assert np.flatnonzero(g.val_mask).tolist() == [2, 3, 4, 5, 7, 9]
    assert g.num_edges == 6  # 0-1, 0-5, 5-9 both ways


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_foreign_objects_in_pickles_are_refused(tmp_path):
    write_planetoid(tmp_path, "evil")
    with open(tmp_path / "ind.evil.graph", "wb") as handle:
        pickle.dump(Evil(), handle, protocol=2)
    with pytest.raises(GraphFormatError, match="refusing to load .*print"):
        load_planetoid(tmp_path, "evil")


def test_missing_file_and_folder_with_several_datasets(tmp_path):
    write_planetoid(tmp_path, "one")
    write_planetoid(tmp_path, "two")
    with pytest.raises(GraphFormatError, match="pick one with --name"):
        load_graph(tmp_path, format="planetoid")
    assert load_graph(tmp_path, name="two").name == "two"
    (tmp_path / "ind.two.ty").unlink()
    with pytest.raises(GraphFormatError, match="ind.two.ty: missing Planetoid file"):
        load_planetoid(tmp_path, "two")
