import os
import tempfile
from pathlib import Path

import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: int = 0


class SumTask(vf.Task[SumData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        """1 when the answer's last word is the sum; raises on a last word that is no number."""
        messages = trace.assistant_messages
        text = (vf.types.content_text(messages[-1].content) or "") if messages else ""
        words = text.replace(".", " ").split()
        if words and words[-1] == "boom":  # a grader that crashes on what the agent wrote
            raise ValueError(f"cannot read {words[-1]!r}")
        # a grader that takes its whole process down on what the agent wrote (``die``), or the first
        # time only (``once``: a marker beside the bridge's process, which every worker it starts
        # shares -- a worker's own directory is new each start), as an outside fault would
        if words and words[-1] == "die":
            os._exit(3)
        marker = Path(tempfile.gettempdir()) / f"envhub-sum-answer-once-{os.getppid()}"
        if words and words[-1] == "once" and not marker.exists():
            marker.touch()
            os._exit(3)
        return 1.0 if words and words[-1] == str(self.data.answer) else 0.0


class SumConfig(vf.TasksetConfig):
    num_tasks: int = 6


class SumAnswerTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            yield SumTask(SumData(id=f"sum-{i}", prompt=f"What is {i} + {i}? Answer with the number.",
                                  answer=2 * i), self.config.task)
