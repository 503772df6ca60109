"""A deterministic, realistic order workload and the totals it should produce."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal

import orjson

__all__ = ["REGIONS", "Expected", "order_stream"]

REGIONS = {
    "eu-west": ("Europe West", "0.21"),
    "eu-central": ("Europe Central", "0.19"),
    "us-east": ("US East", "0.07"),
    "us-west": ("US West", "0.08"),
    "ap-south": ("Asia Pacific South", "0.18"),
    "ap-east": ("Asia Pacific East", "0.10"),
}
_SKUS = [f"sku-{n:04d}" for n in range(500)]
_WEIGHTS = [40, 15, 20, 12, 8, 5]


@dataclass
class Expected:
    """What the pipeline's outputs must add up to (per unique order, duplicates excluded)."""

    orders: int = 0
    by_region: dict[str, tuple[int, Decimal]] = field(default_factory=dict)

    def add(self, region: str, amount: Decimal) -> None:
        count, total = self.by_region.get(region, (0, Decimal("0.00")))
        self.by_region[region] = (count + 1, total + amount)
        self.orders += 1


def order_stream(count: int, seed: int = 7) -> Iterator[tuple[str, str, bytes, Decimal]]:
    """Yield ``(order_id, region, json, amount)`` for ``count`` orders, deterministically.

    The ``ts`` field is the wall-clock time the order is generated (epoch ms), so
    end-to-end latency can be read off the output.

    Example::

        for order_id, region, body, amount in order_stream(3):
            print(order_id, region, len(body))
    """
    rng = random.Random(seed)
    regions = list(REGIONS)
    for n in range(count):
        region = rng.choices(regions, _WEIGHTS)[0]
        items = []
        cents = 0
        for _ in range(rng.randint(1, 5)):
            qty = rng.randint(1, 4)
            price = rng.randint(199, 19999)
            cents += qty * price
            items.append({"sku": rng.choice(_SKUS), "qty": qty, "price": price / 100})
        amount = Decimal(cents).scaleb(-2)
        order_id = f"ord-{n:08d}"
        body = orjson.dumps(
            {
                "order_id": order_id,
                "customer": f"cust-{int(rng.paretovariate(1.2) * 97) % 25000:05d}",
                "region": region,
                "items": items,
                "amount": str(amount),
                "ts": int(time.time() * 1000),
            }
        )
        yield order_id, region, body, amount
