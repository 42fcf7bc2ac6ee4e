import os

import verifiers.v1 as vf


class ProcessRewardTask(vf.Task[vf.TaskData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def unstable(self, trace: vf.Trace) -> float:
        return (os.getpid() % 997 + 1) / 1000


class ProcessRewardTaskset(vf.Taskset[ProcessRewardTask, vf.TasksetConfig]):
    def load(self):
        for i in range(2):
            yield ProcessRewardTask(vf.TaskData(id=f"p-{i}", prompt="Say anything."), self.config.task)
