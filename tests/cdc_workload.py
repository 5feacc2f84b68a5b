"""A seeded workload over three related PostgreSQL tables, for change data capture tests.

    create_schema(db)
    load_snapshot(db, customers=2_000, seed=7)          # COPY: the rows Debezium snapshots
    workload = Workload.from_database(db, seed=7)
    workload.run(db, transactions=500)                  # inserts, updates, deletes, key moves,
                                                        # multi-statement transactions, rollbacks
    add_column_mid_stream(db); workload.channel = True  # ALTER TABLE ... ADD COLUMN

customers 1-N orders 1-N order_items, with foreign keys that cascade: deleting a customer
deletes its orders and their items, moving a customer's key (UPDATE of the primary key)
updates its orders' `customer_id`, moving an order's key moves the primary keys of its
items (order_items' key is `(order_id, line_no)`). The source of truth is PostgreSQL
itself (`SELECT * FROM`): the workload keeps only the keys it may pick from, and only for
transactions that commit.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import psycopg

TABLES = ("customers", "orders", "order_items")
KEYS = {
    "customers": ("customer_id",),
    "orders": ("order_id",),
    "order_items": ("order_id", "line_no"),
}

SCHEMA_SQL = """
CREATE TABLE customers (
    customer_id bigint PRIMARY KEY,
    name text NOT NULL,
    email text,
    tier integer NOT NULL,
    balance numeric(12, 2) NOT NULL,
    created_at timestamp(6) NOT NULL,
    active boolean NOT NULL
);
CREATE TABLE orders (
    order_id bigint PRIMARY KEY,
    customer_id bigint NOT NULL
        REFERENCES customers ON DELETE CASCADE ON UPDATE CASCADE,
    status text NOT NULL,
    amount numeric(10, 2),
    placed_at timestamp(6) NOT NULL,
    note text
);
CREATE TABLE order_items (
    order_id bigint NOT NULL REFERENCES orders ON DELETE CASCADE ON UPDATE CASCADE,
    line_no integer NOT NULL,
    sku text NOT NULL,
    quantity integer NOT NULL,
    price double precision NOT NULL,
    PRIMARY KEY (order_id, line_no)
);
"""
STATUSES = ("new", "paid", "shipped", "cancelled", "returned")
EPOCH = dt.datetime(2024, 1, 1)
NAME_CHARS = "abcdefghijklmnopqrstuvwxyz ÄéßÅø'\"\\,;"


def create_schema(db: psycopg.Connection) -> None:
    with db.transaction():
        db.execute(SCHEMA_SQL)


def qualified(tables: tuple[str, ...] = TABLES) -> tuple[str, ...]:
    return tuple(f"public.{t}" for t in tables)


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(NAME_CHARS) for _ in range(rng.randint(3, 14))).strip() or "x"


def _money(rng: random.Random, high: int) -> Decimal:
    return Decimal(rng.randint(-100, high * 100)) / 100


def _instant(rng: random.Random) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=rng.randint(0, 2 * 365 * 86_400 * 1_000_000))


def customer_row(rng: random.Random, customer_id: int) -> tuple[Any, ...]:
    email = None if rng.random() < 0.2 else f"{_name(rng).replace(' ', '')}@example.com"
    return (
        customer_id,
        _name(rng),
        email,
        rng.randint(0, 5),
        _money(rng, 99_999),
        _instant(rng),
        rng.random() < 0.8,
    )


def order_row(rng: random.Random, order_id: int, customer_id: int) -> tuple[Any, ...]:
    amount = None if rng.random() < 0.05 else _money(rng, 9_999)
    note = None if rng.random() < 0.7 else _name(rng)
    return (order_id, customer_id, rng.choice(STATUSES), amount, _instant(rng), note)


def item_row(rng: random.Random, order_id: int, line_no: int) -> tuple[Any, ...]:
    return (
        order_id,
        line_no,
        f"sku-{rng.randint(1, 5000):05d}",
        rng.randint(1, 20),
        round(rng.uniform(0.01, 999.0), rng.choice((2, 6, 9))),
    )


def load_snapshot(db: psycopg.Connection, customers: int, seed: int) -> dict[str, int]:
    """COPY `customers` customers, ~3 orders each and ~2 items an order; counts per table."""
    rng = random.Random(seed)
    counts = dict.fromkeys(TABLES, 0)
    order_id = 0
    with db.transaction(), db.cursor() as cursor:
        with cursor.copy("COPY customers FROM STDIN") as copy:
            for customer_id in range(1, customers + 1):
                copy.write_row(customer_row(rng, customer_id))
        counts["customers"] = customers
        orders: list[tuple[int, int]] = []
        with cursor.copy("COPY orders FROM STDIN") as copy:
            for customer_id in range(1, customers + 1):
                for _ in range(rng.randint(1, 5)):
                    order_id += 1
                    copy.write_row(order_row(rng, order_id, customer_id))
                    orders.append((order_id, rng.randint(1, 3)))
        counts["orders"] = order_id
        with cursor.copy("COPY order_items FROM STDIN") as copy:
            for oid, lines in orders:
                for line_no in range(1, lines + 1):
                    copy.write_row(item_row(rng, oid, line_no))
                    counts["order_items"] += 1
    return counts


@dataclass
class Keys:
    """The keys the workload picks from: customers, orders (-> customer), items per order."""

    customers: set[int] = field(default_factory=set)
    orders: dict[int, int] = field(default_factory=dict)
    items: dict[int, set[int]] = field(default_factory=dict)
    next_customer: int = 1
    next_order: int = 1

    def copy(self) -> Keys:
        return Keys(
            set(self.customers),
            dict(self.orders),
            {k: set(v) for k, v in self.items.items()},
            self.next_customer,
            self.next_order,
        )


@dataclass
class Workload:
    keys: Keys
    rng: random.Random
    channel: bool = False  # orders.channel exists (added mid-stream)
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_database(cls, db: psycopg.Connection, seed: int) -> Workload:
        keys = Keys()
        keys.customers = {r[0] for r in db.execute("SELECT customer_id FROM customers")}
        keys.orders = dict(db.execute("SELECT order_id, customer_id FROM orders").fetchall())
        for order_id, line_no in db.execute("SELECT order_id, line_no FROM order_items"):
            keys.items.setdefault(order_id, set()).add(line_no)
        keys.next_customer = max(keys.customers, default=0) + 1_000_000
        keys.next_order = max(keys.orders, default=0) + 1_000_000
        db.commit()
        return cls(keys, random.Random(seed))

    def run(self, db: psycopg.Connection, transactions: int, rollback_share: float = 0.1) -> None:
        for _ in range(transactions):
            self.transaction(db, rollback=self.rng.random() < rollback_share)

    def transaction(self, db: psycopg.Connection, rollback: bool = False) -> None:
        """1-6 statements in one transaction; a rolled-back one leaves the keys as they were."""
        before = self.keys.copy() if rollback else None
        with db.cursor() as cursor:
            for _ in range(self.rng.randint(1, 6)):
                operation = self.rng.choices(OPERATIONS, weights=WEIGHTS)[0]
                operation(self, cursor)
                self.counts[operation.__name__] = self.counts.get(operation.__name__, 0) + 1
        if rollback and before is not None:
            db.rollback()
            self.keys = before
            self.counts["rolled_back_transactions"] = (
                self.counts.get("rolled_back_transactions", 0) + 1
            )
        else:
            db.commit()

    # --- operations (each keeps `keys` in step with what it did) -------------------------

    def insert_customer(self, cursor: psycopg.Cursor) -> None:
        customer_id = self.keys.next_customer
        self.keys.next_customer += 1
        cursor.execute(
            "INSERT INTO customers VALUES (%s, %s, %s, %s, %s, %s, %s)",
            customer_row(self.rng, customer_id),
        )
        self.keys.customers.add(customer_id)

    def update_customer(self, cursor: psycopg.Cursor) -> None:
        if not self.keys.customers:
            return self.insert_customer(cursor)
        row = customer_row(self.rng, self._pick(self.keys.customers))
        cursor.execute(
            "UPDATE customers SET email = %s, tier = %s, balance = %s, active = %s "
            "WHERE customer_id = %s",
            (row[2], row[3], row[4], row[6], row[0]),
        )

    def delete_customer(self, cursor: psycopg.Cursor) -> None:
        if not self.keys.customers:
            return None
        customer_id = self._pick(self.keys.customers)
        cursor.execute("DELETE FROM customers WHERE customer_id = %s", (customer_id,))
        self.keys.customers.discard(customer_id)
        for order_id in [o for o, c in self.keys.orders.items() if c == customer_id]:
            del self.keys.orders[order_id]
            self.keys.items.pop(order_id, None)
        return None

    def move_customer(self, cursor: psycopg.Cursor) -> None:
        """UPDATE of the primary key: cascades to the customer's orders."""
        if not self.keys.customers:
            return None
        old = self._pick(self.keys.customers)
        new = self.keys.next_customer
        self.keys.next_customer += 1
        cursor.execute("UPDATE customers SET customer_id = %s WHERE customer_id = %s", (new, old))
        self.keys.customers.discard(old)
        self.keys.customers.add(new)
        for order_id, customer_id in self.keys.orders.items():
            if customer_id == old:
                self.keys.orders[order_id] = new
        return None

    def insert_order(self, cursor: psycopg.Cursor) -> None:
        if not self.keys.customers:
            return self.insert_customer(cursor)
        order_id = self.keys.next_order
        self.keys.next_order += 1
        row = order_row(self.rng, order_id, self._pick(self.keys.customers))
        if self.channel:
            cursor.execute(
                "INSERT INTO orders (order_id, customer_id, status, amount, placed_at, note, "
                "channel) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (*row, self.rng.choice(("web", "store", "phone", None))),
            )
        else:
            cursor.execute("INSERT INTO orders VALUES (%s, %s, %s, %s, %s, %s)", row)
        self.keys.orders[order_id] = row[1]
        lines = self.rng.randint(1, 4)
        cursor.executemany(
            "INSERT INTO order_items VALUES (%s, %s, %s, %s, %s)",
            [item_row(self.rng, order_id, line) for line in range(1, lines + 1)],
        )
        self.keys.items[order_id] = set(range(1, lines + 1))
        return None

    def update_order(self, cursor: psycopg.Cursor) -> None:
        if not self.keys.orders:
            return self.insert_order(cursor)
        order_id = self._pick(self.keys.orders)
        row = order_row(self.rng, order_id, 0)
        if self.channel and self.rng.random() < 0.5:
            cursor.execute(
                "UPDATE orders SET status = %s, channel = %s WHERE order_id = %s",
                (row[2], self.rng.choice(("web", "store", None)), order_id),
            )
        else:
            cursor.execute(
                "UPDATE orders SET status = %s, amount = %s, note = %s WHERE order_id = %s",
                (row[2], row[3], row[5], order_id),
            )
        return None

    def delete_order(self, cursor: psycopg.Cursor) -> None:
        if not self.keys.orders:
            return None
        order_id = self._pick(self.keys.orders)
        cursor.execute("DELETE FROM orders WHERE order_id = %s", (order_id,))
        del self.keys.orders[order_id]
        self.keys.items.pop(order_id, None)
        return None

    def move_order(self, cursor: psycopg.Cursor) -> None:
        """UPDATE of the primary key: cascades to the keys of the order's items."""
        if not self.keys.orders:
            return None
        old = self._pick(self.keys.orders)
        new = self.keys.next_order
        self.keys.next_order += 1
        cursor.execute("UPDATE orders SET order_id = %s WHERE order_id = %s", (new, old))
        self.keys.orders[new] = self.keys.orders.pop(old)
        if old in self.keys.items:
            self.keys.items[new] = self.keys.items.pop(old)
        return None

    def update_item(self, cursor: psycopg.Cursor) -> None:
        order_id = self._order_with_items()
        if order_id is None:
            return None
        line_no = self._pick(self.keys.items[order_id])
        cursor.execute(
            "UPDATE order_items SET quantity = %s, price = %s WHERE order_id = %s AND line_no = %s",
            (self.rng.randint(1, 50), round(self.rng.uniform(0.01, 500), 4), order_id, line_no),
        )
        return None

    def delete_item(self, cursor: psycopg.Cursor) -> None:
        order_id = self._order_with_items()
        if order_id is None:
            return None
        line_no = self._pick(self.keys.items[order_id])
        cursor.execute(
            "DELETE FROM order_items WHERE order_id = %s AND line_no = %s", (order_id, line_no)
        )
        self.keys.items[order_id].discard(line_no)
        return None

    def move_item(self, cursor: psycopg.Cursor) -> None:
        """A new `line_no`: the item's two-column primary key changes."""
        order_id = self._order_with_items()
        if order_id is None:
            return None
        lines = self.keys.items[order_id]
        old = self._pick(lines)
        new = max(lines) + 1
        cursor.execute(
            "UPDATE order_items SET line_no = %s WHERE order_id = %s AND line_no = %s",
            (new, order_id, old),
        )
        lines.discard(old)
        lines.add(new)
        return None

    def _order_with_items(self) -> int | None:
        for _ in range(5):
            if not self.keys.items:
                return None
            order_id = self._pick(self.keys.items)
            if self.keys.items[order_id]:
                return order_id
        return None

    def _pick(self, keys: set[int] | dict[int, Any]) -> int:
        # A sample of a sorted view would cost O(n) per pick; keys are drawn by position
        # in insertion order instead, seeded, so a run is reproducible.
        return next(iter(keys)) if len(keys) == 1 else _nth(keys, self.rng.randrange(len(keys)))


def _nth(keys: set[int] | dict[int, Any], index: int) -> int:
    for position, key in enumerate(keys):
        if position == index:
            return key
    raise IndexError(index)


OPERATIONS = (
    Workload.insert_customer,
    Workload.update_customer,
    Workload.delete_customer,
    Workload.move_customer,
    Workload.insert_order,
    Workload.update_order,
    Workload.delete_order,
    Workload.move_order,
    Workload.update_item,
    Workload.delete_item,
    Workload.move_item,
)
WEIGHTS = (6, 10, 2, 2, 10, 12, 3, 3, 10, 4, 3)


def add_column_mid_stream(db: psycopg.Connection) -> None:
    """`ALTER TABLE orders ADD COLUMN channel text` (nullable: existing rows hold NULL)."""
    with db.transaction():
        db.execute("ALTER TABLE orders ADD COLUMN channel text")


def source_rows(db: psycopg.Connection, table: str) -> list[dict[str, Any]]:
    """`SELECT * FROM table` as dicts, ordered by the primary key."""
    with db.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        order = ", ".join(KEYS[table])
        cursor.execute(f"SELECT * FROM {table} ORDER BY {order}")  # names are constants
        rows = cursor.fetchall()
    db.commit()
    return rows
