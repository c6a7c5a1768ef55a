"""Module classes are folders: every subfolder of a modules directory that has a `connectors`
file is a class named after the folder. Nothing is parsed until a class is asked for, so one
broken module does not stop graphs that never use it."""

from __future__ import annotations

import traceback
from pathlib import Path

from .errors import GraphError, closest
from .module import ModuleClass

DEFAULT_DIR = Path(__file__).resolve().parent.parent / "modules"


class Registry:
    def __init__(self, dirs: list[str | Path] | None = None):
        self.dirs = [Path(d) for d in dirs] if dirs is not None else [DEFAULT_DIR]
        self._folders: dict[str, Path] = {}
        for d in self.dirs:
            if not d.is_dir():
                continue
            for sub in sorted(d.iterdir()):
                # an earlier directory wins, so a project folder can shadow a shipped module
                if (sub / "connectors").is_file() and sub.name not in self._folders:
                    self._folders[sub.name] = sub
        self._loaded: dict[str, ModuleClass] = {}

    def names(self) -> list[str]:
        return sorted(self._folders)

    def __contains__(self, name: str) -> bool:
        return name in self._folders

    def folder(self, name: str) -> Path | None:
        return self._folders.get(name)

    def get(self, name: str, where: str | None = None) -> ModuleClass:
        cls = self._loaded.get(name)
        if cls is not None:
            return cls
        folder = self._folders.get(name)
        if folder is None:
            raise GraphError(f"unknown module '{name}'", where=where,
                             hint=closest(name, self._folders))
        cls = self._load(name, folder)
        self._loaded[name] = cls
        return cls

    @staticmethod
    def _load(name: str, folder: Path) -> ModuleClass:
        try:
            return ModuleClass(name, folder)
        except GraphError:
            raise  # declaration errors already name file:line
        except SyntaxError as e:
            raise GraphError(f"module '{name}' hooks do not parse: {e.msg}",
                             where=f"{e.filename}:{e.lineno}") from None
        except Exception as e:  # noqa: BLE001 - a hook file failing at import is bad input
            code = str(folder / "module.py")
            lines = [f.lineno for f in traceback.extract_tb(e.__traceback__)
                     if f.filename == code]
            where = f"{code}:{lines[-1]}" if lines else code
            raise GraphError(f"module '{name}' hooks fail to load: {type(e).__name__}: {e}",
                             where=where) from None
