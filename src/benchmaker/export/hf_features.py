"""The ``huggingface`` schema metadata of the exported parquet files, readable by datasets 3.6 to 5.x.

``datasets`` reads a parquet file's features from the ``huggingface`` key of its arrow schema
metadata (``load_dataset("parquet", data_files=...)``; a folder with a card reads the card's
``dataset_info`` instead). datasets 4.0 renamed the list feature: ``Features.to_dict()`` now writes
``{"_type": "List", "feature": ...}``, which datasets 3.6 rejects (``generate_from_dict``:
``Feature type 'List' not found``). A list written in the shorthand every version shares, a JSON
list holding the item feature (``[{"dtype": "string", "_type": "Value"}]``), reads as a list in all
of them: ``generate_from_dict`` turns a JSON list into a Python list of features (3.6: the list
shorthand of ``Sequence``; 4.x/5.x: ``List``; datasets/features/features.py, ``generate_from_dict``
and ``get_nested_type``). ``Value``, ``Image`` and structs (plain dicts) are written the same by all
versions. tests/test_export_publish.py checks the metadata against what each version reads.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["arrow_schema", "portable_features"]


def portable_features(obj: Any) -> Any:
    """``Features.to_dict()`` output with every variable-length list in the JSON-list shorthand."""
    if isinstance(obj, list):
        return [portable_features(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if obj.get("_type") in ("List", "Sequence") and obj.get("length", -1) == -1 and "feature" in obj:
        return [portable_features(obj["feature"])]
    return {k: portable_features(v) for k, v in obj.items()}


def arrow_schema(features) -> Any:
    """``features.arrow_schema`` with the portable ``huggingface`` metadata (see the module doc)."""
    schema = features.arrow_schema
    meta = json.loads(schema.metadata[b"huggingface"])
    meta["info"]["features"] = portable_features(features.to_dict())
    return schema.with_metadata({**schema.metadata, b"huggingface": json.dumps(meta).encode()})
