"""Name → implementation registries for drivers.

Implementations register themselves with a decorator; ``load`` imports the
implementation's module on demand, so that asking for the simulated arm never
imports franky.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

from proctor.core.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, role: str, modules: dict[str, str]) -> None:
        self.role = role
        # name → module that registers it (imported lazily)
        self._modules = dict(modules)
        self._classes: dict[str, type[T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorate(cls: type[T]) -> type[T]:
            self._classes[name] = cls
            return cls

        return decorate

    def names(self) -> list[str]:
        return sorted(set(self._modules) | set(self._classes))

    def load(self, name: str) -> type[T]:
        if name not in self._classes:
            module = self._modules.get(name)
            if module is None:
                raise ConfigError(
                    f"{self.role} driver '{name}' is unknown; known: {', '.join(self.names())}"
                )
            importlib.import_module(module)
        if name not in self._classes:
            raise ConfigError(
                f"{self.role} driver module {self._modules[name]} did not register '{name}'"
            )
        return self._classes[name]
