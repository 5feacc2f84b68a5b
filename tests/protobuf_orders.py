"""Protobuf messages built at run time for registry tests: an Order (shop/order_<tag>.proto)
that imports an Address (shop/address_<tag>.proto), as two files, so the registry holds a
schema with a reference."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

FIELD = descriptor_pb2.FieldDescriptorProto


def order_importing_address(
    tag: str, id_type: int = FIELD.TYPE_STRING, floor: bool = False, stops: bool = False
) -> tuple[type, type, str]:
    """(Order class, Address class, the address file's name). Address has `street` (and
    `floor`, an int32, if asked); Order has `id` of `id_type`, `ship_to` an Address (and
    `stops`, repeated Addresses, if asked)."""
    package = f"shop{tag}"
    address = descriptor_pb2.FileDescriptorProto(
        name=f"shop/address_{tag}.proto", package=package, syntax="proto3"
    )
    message = address.message_type.add(name="Address")
    message.field.add(name="street", number=1, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    if floor:
        message.field.add(name="floor", number=2, type=FIELD.TYPE_INT32, label=FIELD.LABEL_OPTIONAL)
    order = descriptor_pb2.FileDescriptorProto(
        name=f"shop/order_{tag}.proto", package=package, syntax="proto3", dependency=[address.name]
    )
    message = order.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=id_type, label=FIELD.LABEL_OPTIONAL)
    addresses = [("ship_to", 2, FIELD.LABEL_OPTIONAL)] + (
        [("stops", 3, FIELD.LABEL_REPEATED)] if stops else []
    )
    for name, number, label in addresses:
        message.field.add(
            name=name,
            number=number,
            type=FIELD.TYPE_MESSAGE,
            label=label,
            type_name=f".{package}.Address",
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(address)
    pool.Add(order)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Address")),
        address.name,
    )
