"""Module code under stable import names (pipeline/loader.py): `vkgraph.modules.<name>` with
dashes as underscores, for shipped and user module folders; each file runs once, with a
sys.modules entry, so dataclasses work and modules import each other normally."""

from __future__ import annotations

import subprocess
import sys

from test_wheel import installed  # noqa: F401 (fixture)

from vkgraph.pipeline.registry import Registry

USER = {
    "my-mod/connectors": "input:read:rgba:*\noutput:write:rgba:f32\n",
    "my-mod/module.py": '''from dataclasses import dataclass, field

from vkgraph.modules.my_mod.helper import SCALE

RUNS = []
RUNS.append(1)


@dataclass
class Plan:
    levels: int
    sizes: list = field(default_factory=list)

    def scaled(self):
        return self.levels * SCALE


def init(module):
    module.data["plan"] = Plan(3)
''',
    "my-mod/helper.py": "SCALE = 7\n",
    "other/connectors": "input:read:rgba:*\noutput:write:rgba:f32\n",
    "other/module.py": "from vkgraph.modules.my_mod.module import Plan\n\n"
                       "def make():\n    return Plan(2)\n",
}


def write(folder, files=USER):
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def test_user_module_code_has_a_stable_name_and_dataclasses_work(tmp_path):
    write(tmp_path)
    reg = Registry([tmp_path])
    hooks = reg.get("my-mod").hooks
    assert hooks.__name__ == "vkgraph.modules.my_mod.module"
    assert sys.modules["vkgraph.modules.my_mod.module"] is hooks
    assert hooks.Plan(2).scaled() == 14 and hooks.Plan(1) == hooks.Plan(1)
    # another module imports it normally, and gets the same code (it ran once)
    other = reg.get("other").hooks
    assert isinstance(other.make(), hooks.Plan)
    assert hooks.RUNS == [1]
    assert Registry([tmp_path]).get("my-mod").hooks is hooks


def test_another_folder_for_the_same_name_is_loaded_afresh(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    write(one)
    write(two, {**USER, "my-mod/helper.py": "SCALE = 10\n"})
    assert Registry([one]).get("my-mod").hooks.Plan(1).scaled() == 7
    assert Registry([two]).get("my-mod").hooks.Plan(1).scaled() == 10


def test_a_second_copy_of_the_loader_shares_the_finder(tmp_path):
    """A module.py that imports the tree as the top-level `pipeline` makes a second copy of
    loader.py: it adds no second finder and shares the first one's folder map, so a folder
    registered after it is the one a name imports from (two maps made the first finder
    import the folder it knew before)."""
    import importlib.util

    from vkgraph.pipeline import loader

    spec = importlib.util.spec_from_file_location("vkgraph.pipeline._loader_copy",
                                                  loader.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    try:
        finders = [f for f in sys.meta_path if type(f).__name__ == "_Finder"]
        assert len(finders) == 1
        assert copy._FOLDERS is loader._FOLDERS
        one, two = tmp_path / "one", tmp_path / "two"
        write(one)
        write(two, {**USER, "my-mod/helper.py": "SCALE = 10\n"})
        assert Registry([one]).get("my-mod").hooks.Plan(1).scaled() == 7
        copy.register("my-mod", two / "my-mod")
        import vkgraph.modules.my_mod.module as hooks

        assert hooks.Plan(1).scaled() == 10
    finally:
        sys.modules.pop("vkgraph.pipeline._loader_copy", None)


def test_kpn_imports_kpn_t_once():
    reg = Registry()
    kpn, kpn_t = reg.get("kpn").hooks, reg.get("kpn-t").hooks
    assert kpn_t.__name__ == "vkgraph.modules.kpn_t.module"
    assert kpn.forward_nodes is kpn_t.forward_nodes
    assert kpn.trained_with is kpn_t.trained_with
    import vkgraph.modules.kpn_t.module as direct
    from vkgraph.modules.kpn_t import reference

    assert direct is kpn_t and reference.__name__ == "vkgraph.modules.kpn_t.reference"


def test_installed_wheel_imports_module_code(installed, tmp_path):  # noqa: F811
    bin_dir, _ = installed
    write(tmp_path / "mods")
    code = ("import vkgraph.modules.kpn.module as kpn, vkgraph.modules.kpn_t.module as t; "
            "assert kpn.forward_nodes is t.forward_nodes; "
            "from vkgraph.pipeline.registry import Registry; "
            "h = Registry().get('other').hooks; print(h.make().scaled(), t.__file__)")
    res = subprocess.run([str(bin_dir / "python"), "-c", code], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={"VKGRAPH_MODULES": str(tmp_path / "mods"), "PATH": ""})
    assert res.returncode == 0, res.stderr
    scaled, where = res.stdout.split()
    assert scaled == "14" and where.startswith(str(bin_dir.parent)), res.stdout
