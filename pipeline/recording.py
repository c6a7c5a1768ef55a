"""A build's recording stage: kernels compiled and checked once, one command list per buffer
parity (the streaming sources' copies, then every scheduled node), and run_upto's partial
lists.
"""

from __future__ import annotations

from pathlib import Path

from .buffers import FRAME_LISTS
from .kernels import check_bindings, check_params, kernel_spirv, pack_push
from .module import CLEAR
from .nodes import Node


class Recording:
    """Recording stage of Build (pipeline/runner.py). From the scheduled nodes and the
    allocated buffers it makes `kernels` (pipeline and push constants per node),
    `streaming` (sources uploaded every frame) and `commands` (one list per parity)."""

    def _kernel_dirs(self) -> list[Path]:
        registry = getattr(self.graph, "registry", None)
        return list(getattr(registry, "dirs", ()))

    # -- recording
    def _record(self) -> None:
        dev = self.device
        kernels = {}
        for node in self.schedule:
            if node.kernel is None:
                continue
            cls = node.module.cls
            spirv = kernel_spirv(node.shader, node.kernel, node.defines, self._kernel_dirs(),
                                 cls.params, str(cls.folder / "params"))
            check_bindings(node, spirv)
            check_params(f"{node.shader}/{node.kernel}.comp", cls.params, spirv)
            push = pack_push(node.push)
            kernels[id(node)] = (dev.kernel(spirv, len(node.connectors), len(push), node.local),
                                 push)
        self.kernels = kernels
        parities = 2 if any(len(b) == 2 for b in self.buffers.values()) else 1
        assert FRAME_LISTS % parities == 0  # list k runs the frames of parity k % parities
        for node in self.schedule:
            if node.kernel is None and node.is_source:
                hook = node.module.cls.hook("source_due")
                if hook and hook(self.context, node.module):
                    self.streaming.append(node)
        self.commands = self._command_lists(FRAME_LISTS, self.schedule, self.streaming,
                                            len(self.schedule) if self.profile else 0,
                                            frame=True)

    def _command_lists(self, n: int, nodes, streaming=(), timestamps: int = 0,
                       frame: bool = False) -> list:
        """n command lists, list k for the frames f with f % n == k: (frame=True: a barrier
        against the frame before, which may still run when the list is submitted, and the
        list's global slot copied to the global uniform) the streaming sources' copies, then
        `nodes`."""
        lists = []
        for parity in range(n):
            cl = self.device.commands(timestamps=timestamps).begin()
            if frame:
                cl.barrier(first=True)
                cl.copy(self.global_slots[parity], self.global_buf, 16)
            for node in streaming:
                c0 = node.connectors[0]
                cl.copy(self.staging[id(node)], self.buffer(node, c0.name, parity),
                        c0.nbytes())
            cl.barrier()
            for node in nodes:
                self._record_node(cl, node, parity)
            lists.append(cl.end())
        return lists

    def _record_node(self, cl, node: Node, parity: int) -> None:
        if node.kernel is None:
            if node.is_sink:
                c0 = node.connectors[0]
                cl.copy(self.buffer(node, c0.name, parity), self.staging[id(node)],
                        min(c0.nbytes(), self.staging[id(node)].nbytes))
            return
        cleared = False
        for c in node.connectors:
            if c.is_output and c.flags & CLEAR:
                cl.fill(self.buffer(node, c.name, parity))
                cleared = True
        if cleared:
            cl.barrier()
        kernel, push = self.kernels[id(node)]
        set0 = [self.global_buf, self.params[id(node.module)][0], self.node_info[id(node)]]
        set1 = [self.buffer(node, c.name, parity) for c in node.connectors]
        cl.dispatch(kernel, set0, set1, push, kernel.groups(node.dispatch),
                    label=node.label if self.profile else None)
        cl.barrier()

    def run_upto(self, target: Node, stop: Node | None = None) -> None:
        """Run only `target` and the nodes it reads from, again for the current frame: not
        through feedback inputs, not `stop` nor what only `stop` reads. Sources keep what
        they last uploaded. For tools that probe one output many times with a changed
        buffer (the gradient check runs the forward up to the loss, without the backward
        and the optimiser). The command lists are recorded once per (target, stop)."""
        key = (id(target), id(stop))
        lists = self._partial.get(key)
        if lists is None:
            need, stack = set(), [target]
            while stack:
                n = stack.pop()
                if id(n) in need or n is stop:
                    continue
                need.add(id(n))
                stack += [c.source[0] for c in n.connectors
                          if c.is_input and c.source is not None and not c.feedback]
            nodes = [n for n in self.schedule if id(n) in need and n.kernel is not None]
            lists = self._partial[key] = self._command_lists(len(self.commands), nodes)
        self.finish()
        cl = lists[self.frame % len(lists)]
        cl.submit()
        cl.wait()

    def timings(self) -> list[tuple[str, float]]:
        self.finish()
        return self.commands[self.frame % len(self.commands)].timings()
