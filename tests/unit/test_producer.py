"""The sample producer against the real broker and registry: records land, keyed, with known sums."""

from __future__ import annotations

from tableflow_core.dev.sample_data import generate_orders


def test_same_seed_same_data_other_seed_other_data() -> None:
    a = [r.value for r in generate_orders(200, seed=1)]
    assert a == [r.value for r in generate_orders(200, seed=1)]
    assert a != [r.value for r in generate_orders(200, seed=2)]


def test_json_samples_carry_the_avro_records_values() -> None:
    """Plain JSON and JSON Schema samples: the same records, JSON-typed, valid against
    the dataset's JSON Schema (what the registry's JSONSerializer checks)."""
    import json
    from datetime import datetime
    from decimal import Decimal

    import jsonschema

    from tableflow_core.dev.sample_data import (
        generate_customers,
        json_schema_for,
        json_value,
    )

    for dataset, records in (
        ("orders", generate_orders(300, seed=4, version=2)),
        ("customers", generate_customers(300, seed=4, version=2)),
    ):
        schema = json_schema_for(dataset, version=2)
        validator = jsonschema.Draft7Validator(schema)
        for record in records:
            if record.value is None:
                continue
            document = json.loads(json.dumps(json_value(record.value)))
            validator.validate(document)
            for name, value in record.value.items():
                if isinstance(value, Decimal):
                    assert Decimal(str(document[name])) == value
                elif isinstance(value, datetime):
                    assert datetime.fromisoformat(document[name]) == value
                else:
                    assert document[name] == value
    orders = json_schema_for("orders")
    assert orders["properties"]["amount"] == {"type": "number", "precision": 10, "scale": 2}
    assert "coupon" not in orders["required"] and "order_id" in orders["required"]
