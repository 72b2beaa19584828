"""``PyLateIndex``: a maxsimd corpus behind the interface of PyLate's indexes.

PyLate's retrieval pipeline takes an index object
(``pylate.retrieve.ColBERT(index=...)``); swapping PyLate's own index for a
``PyLateIndex`` runs the same pipeline against maxsimd:

    from pylate import models, retrieve
    import maxsimd.pylate

    index = maxsimd.pylate.PyLateIndex("127.0.0.1:50051", corpus="docs",
                                       override=True)
    index.add_documents(documents_ids=ids, documents_embeddings=model.encode(
        documents, is_query=False))
    retriever = retrieve.ColBERT(index=index)
    results = retriever.retrieve(queries_embeddings=model.encode(
        queries, is_query=True), k=10)   # [[{"id": ..., "score": ...}]]

The interface is that of PyLate's ``pylate/indexes/base.py`` and of its
end-to-end index, ``indexes.PLAID`` (``pylate/indexes/plaid.py``,
PyLate 1.4.0): ``is_end_to_end_index = True``, ``add_documents``,
``remove_documents``, ``__call__(queries_embeddings, k, subset)`` returning,
per query, a best-first list of ``RerankResult`` dicts ``{"id", "score"}``,
and ``get_documents_embeddings``. ``retrieve.ColBERT.retrieve`` hands an
end-to-end index the whole query list and returns what ``__call__`` returns
(PyLate 1.4.0 ``pylate/retrieve/base.py``: ``if
self.index.is_end_to_end_index``; PyLate 1.3 sends every index that is not
a ``Voyager`` the same way). The index scores with exact MaxSim over every
document (or over ``subset``), where PLAID approximates.

This module does not import PyLate (nor torch): the embeddings PyLate's
``models.ColBERT.encode`` returns, numpy arrays or torch tensors (float16,
bfloat16, float32 or float64, on any device), go straight to the client.

Thread-safety: like ``Client``, which it wraps.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from maxsimd._encode import id_strings, is_torch_tensor, to_numpy
from maxsimd.client import Client
from maxsimd.errors import NotFoundError, invalid_argument
from maxsimd.results import IdsLike, Result

# One ranked document, as PyLate's ``pylate.rank.RerankResult`` (a
# TypedDict with "id" and "score").
RerankResult = Dict[str, Any]

__all__ = ["PyLateIndex", "RerankResult"]


# How ids come back: as ``str`` (the type of ids in PyLate's index API) or
# as ``int``.
ID_TYPES = ("str", "int")


def _id_type_name(id_type: Union[str, type]) -> str:
    name = id_type.__name__ if isinstance(id_type, type) else id_type
    if name not in ID_TYPES:
        raise ValueError(f"id_type is {id_type!r}; need 'str' or 'int'")
    return name


def _is_int_id(i: Any) -> Optional[bool]:
    """Whether one id is an integer (True), a string (False), or neither
    (None, left to ``id_strings`` to refuse). Integer numpy scalars and 0-d
    integer arrays and tensors, as iterating an array or tensor yields,
    count as integers."""
    if is_torch_tensor(i) or isinstance(i, np.ndarray):
        if i.ndim != 0:
            return None
        if is_torch_tensor(i):
            return not (i.is_floating_point() or i.is_complex() or
                        str(i.dtype) == "torch.bool")
        return bool(i.dtype.kind in "iu")
    if isinstance(i, (str, bytes)):
        return False
    if isinstance(i, (int, np.integer)) and not isinstance(i, (bool,
                                                               np.bool_)):
        return True
    return None


def _check_id_type(ids: Any, id_type: str) -> None:
    """Refuses ids of the other type than the index's ``id_type``, naming
    the first one: a corpus whose ids come back as ``int`` cannot hold
    "doc-1", and integer ids on a ``str`` index would come back as strings,
    not as the ints that were added."""
    if is_torch_tensor(ids) or (isinstance(ids, np.ndarray) and
                                ids.dtype.kind != "O"):
        # One dtype for all: the first id tells (a 0-d tensor or a numpy
        # scalar); other shapes are left to id_strings to refuse.
        values: List[Any] = list(ids[:1]) if ids.ndim == 1 else []
    else:
        values = list(ids)
    want_int = id_type == "int"
    for n, value in enumerate(values):
        kind = _is_int_id(value)
        if kind is not None and kind != want_int:
            shown = value.item() if hasattr(value, "item") else value
            raise invalid_argument(
                f"documents_ids[{n}] is {shown!r}, "
                f"{'an integer' if kind else 'a string'}, but this index "
                f"has id_type={id_type!r} (ids come back as {id_type}); "
                f"create the index with id_type="
                f"{'int' if kind else 'str'!r} for such ids, and do not mix "
                "the two in one corpus")


def _embeddings_list(embeddings: Any, what: str) -> List[Any]:
    """PyLate's embeddings as a list of ``[tokens, dim]`` items.

    Accepted as ``models.ColBERT.encode`` returns them: a list of arrays or
    tensors (each ``[tokens, dim]``, or ``[1, tokens, dim]`` as padded
    encoding splits them), one ``[n, tokens, dim]`` array or tensor, or one
    ``[tokens, dim]`` for a single text.
    """
    if is_torch_tensor(embeddings) or isinstance(embeddings, np.ndarray):
        ndim = embeddings.ndim
        if ndim == 2:
            return [embeddings]
        if ndim == 3:
            return list(embeddings)
        raise invalid_argument(
            f"{what} has shape {tuple(embeddings.shape)}; need [tokens, dim] "
            "or [n, tokens, dim]")
    out = []
    for i, e in enumerate(embeddings):
        if getattr(e, "ndim", 2) == 3 and e.shape[0] == 1:
            e = e[0]
        out.append(e)
    return out


class PyLateIndex:
    """A maxsimd corpus with the interface of PyLate's indexes.

    Args:
        client: a ``Client``, or a target to open one for (closed by
            ``close()``).
        corpus: the corpus (or alias) holding the documents; created by the
            first ``add_documents`` if it does not exist, with the dim of
            the embeddings and ``create_options``.
        override: drop the corpus first if it exists (PLAID's
            ``override=True``).
        id_type: the type of the corpus's ids, and of the ids in results:
            "str" (the default: PyLate's index API types ids as ``str``) or
            "int" (e.g. ``range`` ids, as PLAID's docstring adds them); the
            types ``str`` and ``int`` are taken too. Ids are strings on the
            wire, so the server cannot tell; an index opened on an existing
            corpus must be given the type its ids were added with.
            ``add_documents`` refuses ids of the other type, naming the
            first (integer scalars of numpy and 0-d integer arrays and
            tensors count as integers).
        batch_size: queries per RerankBatch call of ``__call__`` and
            ``rerank``; at most the server's ``--max_batch_queries``.
        create_options: ``Client.create_corpus`` options for a new corpus:
            ``storage_dtype``, ``layout``, ``normalize``, ``placement``, ...
        client_options: ``Client`` options when ``client`` is a target.
    """

    #: ``__call__`` returns final rankings, as PLAID's does: PyLate's
    #: retriever hands it the queries and returns its answer.
    is_end_to_end_index = True

    def __init__(self, client: Union[Client, str],
                 corpus: str = "colbert", *, override: bool = False,
                 id_type: Union[str, type] = "str",
                 batch_size: int = 64,
                 create_options: Optional[Dict[str, Any]] = None,
                 **client_options: Any) -> None:
        if isinstance(client, Client):
            if client_options:
                raise TypeError("client options go with a target, not with "
                                "a Client")
            self.client, self._owns_client = client, False
        else:
            self.client, self._owns_client = Client(client,
                                                    **client_options), True
        if batch_size < 1:
            raise ValueError(f"batch_size is {batch_size}; need >= 1")
        self.corpus = corpus
        self.batch_size = batch_size
        self.create_options = dict(create_options or {})
        self.id_type = _id_type_name(id_type)
        if override:
            try:
                self.client.drop_corpus(corpus)
            except NotFoundError:
                pass

    def close(self) -> None:
        """Closes the client if this index opened it."""
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> "PyLateIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"maxsimd.pylate.PyLateIndex({self.client.target!r}, " \
               f"corpus={self.corpus!r}, id_type={self.id_type!r})"

    # ------------------------------------------------------------------
    # PyLate's index interface

    def add_documents(self, documents_ids: Union[str, int, IdsLike],
                      documents_embeddings: Any,
                      batch_size: Optional[int] = None,
                      **kwargs: Any) -> "PyLateIndex":
        """Adds documents; returns the index (PLAID's ``add_documents``).

        Args:
            documents_ids: one id, or a list / array / tensor of ids of the
                index's ``id_type``, unique in the corpus.
            documents_embeddings: one ``[tokens, dim]`` per document, as
                ``models.ColBERT.encode(..., is_query=False)`` returns them.
            batch_size: documents per AddDocuments call (each committed
                atomically); None adds all in one atomic call.
            kwargs: ``Client.add_documents`` options (``send_dtype``,
                ``timeout``, ...).
        """
        documents_ids = _id_list(documents_ids)
        ids = id_strings(documents_ids, "documents_ids")
        _check_id_type(documents_ids, self.id_type)
        docs = _embeddings_list(documents_embeddings, "documents_embeddings")
        if len(ids) != len(docs):
            raise invalid_argument(f"{len(ids)} documents_ids for "
                                   f"{len(docs)} documents_embeddings")
        if not ids:
            return self
        try:
            self.client.get_corpus(self.corpus)
        except NotFoundError:
            dim = int(to_numpy(docs[0], "documents_embeddings[0]")[0]
                      .shape[-1])
            self.client.create_corpus(self.corpus, dim,
                                      **self.create_options)
        step = batch_size or len(ids)
        for first in range(0, len(ids), step):
            self.client.add_documents(self.corpus, ids[first:first + step],
                                      docs[first:first + step], **kwargs)
        return self

    def remove_documents(self, documents_ids: IdsLike) -> "PyLateIndex":
        """Deletes documents; ids not in the corpus are skipped, as PLAID
        skips them. Returns the index."""
        self.client.delete_documents(self.corpus, _id_list(documents_ids),
                                     ignore_missing=True)
        return self

    def __call__(self, queries_embeddings: Any, k: int = 10,
                 subset: Optional[Union[Sequence[Any],
                                        Sequence[Sequence[Any]]]] = None
                 ) -> List[List[RerankResult]]:
        """The ``k`` best documents of each query, best first.

        Args:
            queries_embeddings: one ``[tokens, dim]`` per query (a list,
                or ``[n, tokens, dim]``), or one ``[tokens, dim]`` query.
            k: documents per query.
            subset: None ranks every document; a list of ids restricts every
                query to them, a list of lists restricts each query to its
                own; an empty list ranks nothing. Unlike PLAID, which drops
                ids it does not hold, an id missing from the corpus raises
                ``maxsimd.NotFoundError``.
        Returns:
            Per query, a list of ``{"id": ..., "score": ...}``.
        """
        if k < 1:
            raise invalid_argument(f"k is {k}; need >= 1")
        queries = _embeddings_list(queries_embeddings, "queries_embeddings")
        candidates: Optional[List[Optional[IdsLike]]] = None
        if subset is not None:
            if len(subset) == 0:
                return [[] for _ in queries]
            first: Any = subset[0]
            if isinstance(first, (list, tuple, np.ndarray)) or (
                    is_torch_tensor(first) and first.ndim == 1):
                if len(subset) != len(queries):
                    raise invalid_argument(
                        f"subset has {len(subset)} lists for "
                        f"{len(queries)} queries")
                candidates = list(subset)
            else:
                candidates = [subset] * len(queries)
        return self._rank(queries, candidates, k)

    def get_documents_embeddings(self, documents_ids: Sequence[Sequence[Any]]
                                 ) -> List[List[Any]]:
        """Not available: the server keeps the embeddings (as PLAID keeps
        its compressed ones, and raises the same way). PyLate's retriever
        never asks an end-to-end index for them; ``rerank`` ranks given ids
        against the stored embeddings."""
        raise NotImplementedError(
            "maxsimd keeps document embeddings on the server and does not "
            "send them back; rank candidates with PyLateIndex.rerank or "
            "PyLateIndex(...)(queries, k, subset=candidates)")

    # ------------------------------------------------------------------
    # PyLate's rank.rerank, against the stored documents

    def rerank(self, documents_ids: Sequence[IdsLike],
               queries_embeddings: Any,
               documents_embeddings: Any = None,
               device: Optional[str] = None) -> List[List[RerankResult]]:
        """``pylate.rank.rerank`` with the documents held by the server.

        Ranks each query's ``documents_ids[i]`` (all of them, best first),
        the shape ``rank.rerank`` returns. ``documents_embeddings`` and
        ``device`` are accepted so that the call is a drop-in and are not
        used: the server scores the embeddings it stores.
        """
        del documents_embeddings, device
        queries = _embeddings_list(queries_embeddings, "queries_embeddings")
        if len(documents_ids) != len(queries):
            raise invalid_argument(
                f"documents_ids has {len(documents_ids)} lists for "
                f"{len(queries)} queries")
        candidates = [id_strings(ids, "documents_ids") for ids in
                      documents_ids]
        top_k = max([len(set(c)) for c in candidates] + [1])
        return self._rank(queries, list(candidates), top_k)

    # ------------------------------------------------------------------

    def _rank(self, queries: List[Any],
              candidates: Optional[List[Optional[IdsLike]]],
              top_k: int) -> List[List[RerankResult]]:
        out: List[List[RerankResult]] = []
        for first in range(0, len(queries), self.batch_size):
            last = first + self.batch_size
            results = self.client.rerank_batch(
                self.corpus, queries[first:last],
                None if candidates is None else candidates[first:last],
                top_k=top_k)
            out.extend(self._dicts(r) for r in results)
        return out

    def _dicts(self, result: Result) -> List[RerankResult]:
        scores = result.scores.tolist()
        if self.id_type == "str":
            return [{"id": i, "score": s}
                    for i, s in zip(result.str_ids, scores)]
        try:
            ids = result.ids.tolist()
        except ValueError:
            bad = next(i for i in result.str_ids if not _is_decimal(i))
            raise invalid_argument(
                f"corpus {self.corpus!r} holds document id {bad!r}, not an "
                "integer, but this index has id_type='int'; open it with "
                "id_type='str'") from None
        return [{"id": i, "score": s} for i, s in zip(ids, scores)]


def _is_decimal(s: str) -> bool:
    try:
        int(s)
    except ValueError:
        return False
    return True


def _id_list(ids: Any) -> Any:
    """One id (a str, an int, an integer numpy scalar, a 0-d array or
    tensor) as a list of one; an array or tensor of ids as it is; any other
    iterable (a range, a generator) as a list, so that it can be read
    twice."""
    if isinstance(ids, (str, bytes, int, np.integer)) or (
            (is_torch_tensor(ids) or isinstance(ids, np.ndarray)) and
            ids.ndim == 0):
        return [ids]
    if is_torch_tensor(ids) or isinstance(ids, np.ndarray):
        return ids
    return list(ids)
