"""The search beam of the ANN index (:mod:`recalld.stores.sqlite.vector_index`): how wide
usearch's HNSW graph is built and walked, for how many candidates, in an index of what size.

The index only proposes candidates, which the mirror re-scores exactly; the beam decides how
often the exact best are among them (the agreement with exact search, measured in
docs/benchmarks-scale.md) and what the walk costs. Its figures are set here, apart from the
index's files and their checks, and read at each call (benchmarks set them to compare).
"""

from __future__ import annotations

CONNECTIVITY = 16
"""HNSW links per node (usearch's default): recall above 0.95 at 1M in our measurements."""
EXPANSION_ADD = 384
"""Beam width while building: wider builds a better graph, slower. At 1M (the scale corpus,
questions unlike the stored turns), 384 against 128: the exact 10 nearest of 200 questions
found 0.9975 of the time at a search beam of 2,048 in 14.7 ms, against 0.9885 at 4,096 in
20.9 ms; the build took 1,027 s against 248 on 2 cores (docs/design/scale-history.md;
docs/reports/2026-11-27-524ba49-ann-build-beam-1m.json)."""
EXPANSION_SEARCH_MIN = 64
"""Smallest beam width while searching."""
EXPANSION_PER_CANDIDATE = 1.5
"""Search beam width per candidate asked for (from :data:`NARROW_FROM` candidates), at
:data:`EXPANSION_REFERENCE_ROWS` vectors. The default search asks for 432 candidates
(its 216 x ``RESCORE_FACTOR``) and re-scores them exactly, so what matters is how often
the exact top 216 are among them. At 100k (the graph built at :data:`EXPANSION_ADD`, 200
of the scale corpus's questions), a beam of 648 (1.5 a candidate) held 0.989 of the exact
216 and 0.999 of the exact 10, and 148 of 150 default top 10s were those of exact search
(147 at 1.25 a candidate, 145 at 1, 150 at 2); the walk costs about a fifth less than at
2 (docs/design/search-cpu.md, "A narrower beam, again"). Denser graphs (connectivity 24
or 32) reach that recall with a narrower beam at about the same walk's cost and more
memory; float16 copies cost more per walk for the same recall."""
NARROW_FROM = 432
"""Candidates asked for from which :data:`EXPANSION_PER_CANDIDATE` applies: the default
search's ask (216 x ``RESCORE_FACTOR``, more with rows hidden), where it was measured. A
smaller ask keeps :data:`SMALL_PER_CANDIDATE`: with few candidates a beam of 1.5 each
leaves little room (a 1,200-row test index asked for 53 with a beam of 79 missed one of
the exact 10 that 106 found)."""
SMALL_PER_CANDIDATE = 2
"""Search beam width per candidate below :data:`NARROW_FROM` (the beam before 1.5)."""
LEGACY_PER_CANDIDATE = 4
"""The same for a graph built with :data:`LEGACY_EXPANSION_ADD`: at 100k, 80 candidates
with a beam of 320 re-scored to 40 kept recall@40 at 0.98 against exact search (a beam of 80
gave 0.86)."""
EXPANSION_REFERENCE_ROWS = 100_000
"""Beyond this many vectors the beam grows in proportion: at 1M the same recall needed 8x
the beam (recall@40 0.87 with 640, 0.95 with 2560; docs/benchmarks.md)."""
MAX_EXPANSION = 3072
"""Cap on the beam, reached from about 470k vectors (the default search's 432 candidates).
At 1M (200 of the scale corpus's questions, the graph walked from huge pages, see
:mod:`recalld.stores.sqlite.ann_memory`): 196 default top 10s are those of exact search at
3,072 (walks of 15-17 ms a search), 195 at 2,560, 193 at 2,048 (10-13 ms), 191 at 1,536
and 187 at 1,024; with the exact nearest as candidates 199 (docs/design/search-cpu.md,
"The graph walk at 1M")."""
LEGACY_EXPANSION_ADD = 128
"""The build beam of a saved index whose file name does not say it (``<seq>.usearch``, saved
before the build beam grew to :data:`EXPANSION_ADD`)."""
LEGACY_MAX_EXPANSION = 4096
"""Cap on the beam over such a graph: it needs twice the beam for less recall (0.9885 at
4,096 where the wider build finds 0.9975 at 2,048); rebuilt, it gets the new cap."""
NEAR_MEMORY_EXPANSION = 512
"""Cap on the beam of a search from a stored vector for its few nearest (the memories near a
memory, :mod:`recalld.retrieval.updates`): the search ends on the vector's own node, whose
links are its nearest, so a larger index needs no wider beam. At 1M, the 10 nearest of
stored vectors: 0.95 of the exact ones found with 512 (3.3 ms), 0.99 with the 2,080 the size
would call for (16.5 ms; ties in the scale corpus's near-duplicates count as misses)."""


def beam_width(count: int, size: int, built_with: int = EXPANSION_ADD) -> int:
    """The search beam for ``count`` candidates in an index of ``size`` vectors whose graph
    was built with the beam ``built_with`` (an older, narrower build needs a wider one)."""
    older = built_with < EXPANSION_ADD
    growth = max(1.0, size / EXPANSION_REFERENCE_ROWS)
    per_candidate: float = LEGACY_PER_CANDIDATE if older else EXPANSION_PER_CANDIDATE
    if not older and count < NARROW_FROM:
        per_candidate = SMALL_PER_CANDIDATE
    cap = LEGACY_MAX_EXPANSION if older else MAX_EXPANSION
    return max(EXPANSION_SEARCH_MIN, min(cap, int(per_candidate * count * growth)), count)
