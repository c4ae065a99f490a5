"""HEFT's plans of the shared benchmark graphs are pinned: a change to how times are stored (per
device class since issue 16) must not move a single task.

Each case is a graph of ../shared/benchmarks on one of its clusters, with a fingerprint of HEFT's
schedule (SHA-256 of device, start, finish and placement order, as bytes) and its makespan, both
computed before the cost model kept times per device class.
"""

import hashlib

import numpy as np
import pytest

from streammap.cluster.model import load_cluster
from streammap.cost.model import CostModel
from streammap.io.importers import load_graph
from streammap.mappers.heft import heft
from tests.helpers.paths import SHARED, needs_shared

#: (graph, cluster, schedule fingerprint, makespan) before device classes.
PINNED = [
    ("1000genome-chameleon-2ch-100k-001", "cholesky-node", "b4633675fdf23f45", 349.7270120864167),
    ("1000genome-chameleon-2ch-100k-001", "hetero-2x4", "e2020dd30b48eb8e", 520.0150030834567),
    ("1000genome-chameleon-2ch-100k-001", "mixed-vendors", "21502734884455b2", 393.8050060022),
    ("1000genome-chameleon-2ch-100k-001", "small-memory", "66735041c94871b8", 807.3070000000001),
    ("1000genome-chameleon-2ch-100k-001", "topcuoglu-3p", "428eff280034283f", 54392.468),
    ("blast-chameleon-small-001", "cholesky-node", "08d6382573b0f05e", 38.036099000499995),
    ("blast-chameleon-small-001", "hetero-2x4", "6728e50dec51dd7a", 67.02437300002),
    ("blast-chameleon-small-001", "mixed-vendors", "46520d9c4fa1cfc4", 52.75034100001333),
    ("blast-chameleon-small-001", "topcuoglu-3p", "b44e5093e75b960e", 136.146184),
    ("bwa-chameleon-small-001", "cholesky-node", "e364d461c7ab5844", 106.40863000000002),
    ("bwa-chameleon-small-001", "hetero-2x4", "0962cb38a8382b3f", 131.13507008776003),
    ("bwa-chameleon-small-001", "mixed-vendors", "5f08839ab093472c", 78.25954039018002),
    ("bwa-chameleon-small-001", "small-memory", "1f465c406a98121e", 166.67722074345315),
    ("bwa-chameleon-small-001", "topcuoglu-3p", "228d4afcd3660f51", 379.93726300000003),
    ("cholesky-n16-nb128", "cholesky-node", "ecc3029e5fde97f3", 0.01971768266666668),
    ("cholesky-n16-nb512", "cholesky-node", "699419b6bbde175d", 0.1746757586666668),
    ("cholesky-n8-nb128", "cholesky-node", "3f0dccd2ec523b76", 0.004752454333333333),
    ("cholesky-n8-nb512", "cholesky-node", "0d13ce1aa79700a7", 0.031728211333333325),
    ("epigenomics-chameleon-ilmn-1seq-100k-001", "cholesky-node", "dc274dbc90b09be9", 285.43529170200003),
    ("epigenomics-chameleon-ilmn-1seq-100k-001", "hetero-2x4", "7db22de588a010c8", 494.04305426808),
    ("epigenomics-chameleon-ilmn-1seq-100k-001", "mixed-vendors", "385a4e8329b1bb77", 358.04900000000004),
    ("epigenomics-chameleon-ilmn-1seq-100k-001", "small-memory", "391cb5efb50c8694", 796.3360000000001),
    ("epigenomics-chameleon-ilmn-1seq-100k-001", "topcuoglu-3p", "8379565477b08434", 2578.3450000000003),
    ("montage-chameleon-2mass-01d-001", "cholesky-node", "0b6d9ea67c2a62a9", 35.964999999999996),
    ("montage-chameleon-2mass-01d-001", "hetero-2x4", "993641a6bd5f2193", 68.31001002103999),
    ("montage-chameleon-2mass-01d-001", "mixed-vendors", "6abab2ac92e5079d", 54.61393435458667),
    ("montage-chameleon-2mass-01d-001", "small-memory", "55c5a417b4a7fb0e", 104.43476704191997),
    ("montage-chameleon-2mass-01d-001", "topcuoglu-3p", "305689333746f011", 17617332.548),
    ("montage-chameleon-2mass-025d-001", "cholesky-node", "ce14481fa758078e", 114.03171038216671),
    ("montage-chameleon-2mass-025d-001", "hetero-2x4", "6c30411580e1de7b", 222.08001002127995),
    ("montage-chameleon-2mass-025d-001", "mixed-vendors", "64bddfdc6a8a7772", 166.71960265905332),
    ("montage-chameleon-2mass-025d-001", "small-memory", "211d95f71a5486e2", 378.26801002119987),
    ("montage-chameleon-2mass-025d-001", "topcuoglu-3p", "d571bc18ea55b914", 23049270.796),
    ("rnaseq-dirt02-001", "cholesky-node", "af41c3e0e41a2696", 759.454),
    ("rnaseq-dirt02-001", "hetero-2x4", "351b02f0d19f47df", 759.454),
    ("rnaseq-dirt02-001", "mixed-vendors", "a167d544b2ea5f96", 411.227),
    ("rnaseq-dirt02-001", "small-memory", "d25f2098eeb73e5a", 769.4573207933599),
    ("rnaseq-dirt02-001", "topcuoglu-3p", "8daf98ca47caf65e", 4922938.472),
    ("seismology-chameleon-100p-001", "cholesky-node", "132907d34ddc64cf", 6.117),
    ("seismology-chameleon-100p-001", "hetero-2x4", "fa00dbf1a004dd13", 12.091010214399999),
    ("seismology-chameleon-100p-001", "mixed-vendors", "df5f63c220f815a8", 9.1215),
    ("seismology-chameleon-100p-001", "small-memory", "2ecbb44a8891c43b", 20.686005041875),
    ("seismology-chameleon-100p-001", "topcuoglu-3p", "60fe7f6a1b8f2e5c", 17020.886),
    ("soykb-chameleon-10fastq-10ch-001", "cholesky-node", "13dabe01a7e04be2", 3317.33302391475),
    ("soykb-chameleon-10fastq-10ch-001", "hetero-2x4", "7b62761beb274fe5", 3928.211003000133),
    ("soykb-chameleon-10fastq-10ch-001", "mixed-vendors", "d6351c10c1158e87", 2306.86952315568),
    ("soykb-chameleon-10fastq-10ch-001", "small-memory", "a4aad534700ecaf1", 4769.35302700224),
    ("soykb-chameleon-10fastq-10ch-001", "topcuoglu-3p", "f981bafe8d7ee94c", 178753.918),
    ("srasearch-chameleon-10a-001", "cholesky-node", "a8b6e66090d332d5", 1005.8580000000001),
    ("srasearch-chameleon-10a-001", "hetero-2x4", "905f5392b969bbd9", 1339.5313739526398),
    ("srasearch-chameleon-10a-001", "mixed-vendors", "8cab11116ad79907", 930.3436830093867),
    ("srasearch-chameleon-10a-001", "small-memory", "94c21bcd0ef9d409", 2122.579642928),
    ("srasearch-chameleon-10a-001", "topcuoglu-3p", "21936634cbc2c0e4", 8529093.878),
    ("topcuoglu-10", "topcuoglu-3p", "ee503adf7558f488", 80.0),
]


def graph_path(name: str):
    for folder in ("workflows", "cholesky", "classic"):
        path = SHARED / folder / f"{name}.json"
        if path.exists():
            return path
    raise FileNotFoundError(name)


def fingerprint(schedule) -> str:
    h = hashlib.sha256()
    for values in (schedule.device, schedule.start, schedule.finish, schedule.seq):
        h.update(np.ascontiguousarray(values).tobytes())
    return h.hexdigest()[:16]


@needs_shared
@pytest.mark.parametrize("graph, cluster, pinned, makespan", PINNED, ids=[f"{g}@{c}" for g, c, _, _ in PINNED])
def test_heft_places_every_task_where_it_did_before_device_classes(graph, cluster, pinned, makespan):
    cost = CostModel(load_graph(graph_path(graph)), load_cluster(SHARED / "clusters" / f"{cluster}.yaml"))
    schedule = heft(cost)
    assert schedule.makespan == makespan
    assert fingerprint(schedule) == pinned
