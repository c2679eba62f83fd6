"""How dp-synth's Dagster objects are named inside a host's code location.

Every name dp-synth claims in a host's definitions is namespaced or chosen by the host: the asset
keys (`[*key_prefix, <dataset>, <stage>]`), the resource keys of the warehouse and the ledger,
the IO manager key that carries the model graph's units and the concurrency pool of the steps
that open the warehouse. `Names` holds those choices and the settings every asset takes from the
host (group, tags, owners, automation condition); `Names.bind` turns a compute function with
`warehouse` and `ledger` parameters into one that declares the configured resource keys, so one
function body serves any key."""

import inspect
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

ROLES = ("warehouse", "ledger")


@dataclass(frozen=True)
class Names:
    """`key_prefix`: prepended to every dp-synth asset key. `group_name`: the group of every
    dp-synth asset (default: `label`, so no dataset name collides with a host's group, such as
    the dbt model's group a dataset `people` reads). `tags` and `owners`: added
    to every dp-synth asset (beside dp-synth's `privacy` tag). `automation_condition`: set on
    every materializable dp-synth asset. `warehouse`, `ledger`, `io_manager`: resource keys.
    `pool`: the concurrency pool of the steps that open the warehouse (DuckDB allows one writer
    per file; a host sets the pool's limit on its instance)."""

    key_prefix: tuple[str, ...] = ()
    group_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    owners: tuple[str, ...] = ()
    automation_condition: Any = None
    warehouse: str = "dp_synth_warehouse"
    ledger: str = "dp_synth_ledger"
    io_manager: str = "dp_synth_io_manager"
    pool: str | None = "dp_synth_warehouse"

    def key(self, dataset: str, stage: str) -> dg.AssetKey:
        return dg.AssetKey([*self.key_prefix, dataset, stage])

    def op_name(self, dataset: str, name: str) -> str:
        """An op name unique per dataset and key prefix (op names are global in a location)."""
        return "__".join([*self.key_prefix, dataset]) + "_" + name

    @property
    def label(self) -> str:
        """What dp-synth's location-wide objects are named after: the key prefix joined by `__`
        (`privacy`, `analytics__synth`), or `dp_synth` without one."""
        return "__".join(self.key_prefix) or "dp_synth"

    @property
    def group(self) -> str:
        return self.group_name or self.label

    def sensor_name(self, role: str) -> str:
        """A location-wide sensor of dp-synth: `<label>_<role>` (`dp_synth_automation`,
        `privacy_budget`)."""
        return f"{self.label}_{role}"

    def asset_args(self, dataset: str, zone: dict[str, str], source: bool = False,
                   graph: bool = False) -> dict:
        """The decorator arguments every dp-synth asset of `dataset` shares: group, tags (`zone`,
        dp-synth's `privacy` tag, plus the host's), owners and automation condition (not on the
        observable `source`, which the host cannot materialize), and dp-synth's IO manager key
        (not on a graph asset, whose outputs are its inner ops': they name it themselves). The
        stages return a MaterializeResult (no value: their outputs are in the artifact store), so
        no IO manager is called for them; naming dp-synth's keeps the host's `io_manager` out of
        reach even so."""
        args = {"group_name": self.group, "tags": {**self.tags, **zone}}
        if not graph:
            args["io_manager_key"] = self.io_manager
        if not source:
            args["owners"] = list(self.owners) or None
            if self.automation_condition is not None:
                args["automation_condition"] = self.automation_condition
        return args

    def spec(self, dataset: str, stage: str, zone: dict[str, str], **kwargs) -> dg.AssetSpec:
        """The `AssetSpec` of a stage of `dataset` in a stage op (pipeline.py), with the
        arguments of `asset_args` (dp-synth's IO manager key included) and `kwargs` (deps,
        kinds, description)."""
        args = self.asset_args(dataset, zone)
        # what AssetSpec.with_io_manager_key sets, without building the spec twice
        metadata = {"dagster/io_manager_key": args.pop("io_manager_key")}
        return dg.AssetSpec(key=self.key(dataset, stage), metadata=metadata, **args, **kwargs)

    def resource_keys(self, *roles: str) -> set[str]:
        return {getattr(self, role) for role in roles}

    def bind(self, *roles: str):
        """Decorate a compute function whose parameters `roles` (of ROLES) are resources so that
        it reads them from the configured resource keys (module docstring). Put it outermost,
        with `required_resource_keys=names.resource_keys(*roles)` on the Dagster decorator."""
        unknown = set(roles) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown resource roles {sorted(unknown)}; known: {ROLES}")
        keys = {role: getattr(self, role) for role in roles}

        def decorate(fn):
            signature = inspect.signature(fn)
            kept = [p for name, p in signature.parameters.items() if name not in keys]

            def resources(context) -> dict:
                return {role: getattr(context.resources, key) for role, key in keys.items()}

            if inspect.isgeneratorfunction(inspect.unwrap(fn)):
                def compute(context, **inputs):
                    yield from fn(context, **inputs, **resources(context))
            else:
                def compute(context, **inputs):
                    return fn(context, **inputs, **resources(context))
            compute.__name__, compute.__qualname__ = fn.__name__, fn.__qualname__
            compute.__doc__, compute.__module__ = fn.__doc__, fn.__module__
            compute.__signature__ = signature.replace(parameters=kept)
            return compute
        return decorate


def names(key_prefix: str | list[str] | tuple[str, ...] | None = None,
          group_name: str | None = None, tags: dict[str, str] | None = None,
          owners: list[str] | tuple[str, ...] | None = None, automation_condition: Any = None,
          warehouse: str = Names.warehouse, ledger: str = Names.ledger,
          io_manager: str = Names.io_manager, pool: str | None = Names.pool) -> Names:
    """`Names` from the factory's arguments (`key_prefix`: a string or a list of strings);
    refuses an empty prefix part and two roles on one resource key."""
    if key_prefix is None:
        prefix: tuple[str, ...] = ()
    elif isinstance(key_prefix, str):
        prefix = (key_prefix,)
    else:
        prefix = tuple(key_prefix)
    if any(not isinstance(p, str) or not p for p in prefix):
        raise ValueError(f"key_prefix {key_prefix!r} must be a string or a list of non-empty "
                         "strings")
    keys = [warehouse, ledger, io_manager]
    if len(set(keys)) < len(keys):
        raise ValueError(f"the warehouse, ledger and IO manager resource keys must differ: {keys}")
    return Names(key_prefix=prefix, group_name=group_name, tags=dict(tags or {}),
                 owners=tuple(owners or ()), automation_condition=automation_condition,
                 warehouse=warehouse, ledger=ledger, io_manager=io_manager, pool=pool)
