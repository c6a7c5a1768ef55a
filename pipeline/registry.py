"""Module classes are folders: every subfolder of a modules directory that has a `connectors`
file is a class named after the folder. Nothing is parsed until a class is asked for, so one
broken module does not stop graphs that never use it.

The default directories are the user's module folders first (`vkgraph --modules DIR`, then
the folders of $VKGRAPH_MODULES, a path list), then the shipped `modules/`: a user folder can
add modules and shadow shipped ones. A user folder holds `<name>/` module folders; their
kernels lie beside them (`<name>/main.comp`) or in `shaders/<name>/` of the same folder
(`kernels.kernel_file`)."""

from __future__ import annotations

from pathlib import Path

from .errors import GraphError, closest
from .folders import DEFAULT_DIR, ENV, HOST_MODULES, USER_DIRS, default_dirs, user_dirs
from .module import ModuleClass, described, last_frame_in

# where module folders are (folders.py); named here too, the registry being where programs
# look for them
__all__ = ["DEFAULT_DIR", "ENV", "HOST_MODULES", "USER_DIRS", "Registry", "default_dirs",
           "user_dirs"]


class Registry:
    def __init__(self, dirs: list[str | Path] | None = None):
        self.dirs = [Path(d) for d in dirs] if dirs is not None else default_dirs()
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
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a hook file failing at import
            # (sys.exit() there included) is bad input
            raise GraphError(f"module '{name}' hooks fail to load: {described(e)}",
                             where=last_frame_in(folder, e)) from None
