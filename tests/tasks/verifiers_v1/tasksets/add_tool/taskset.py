import verifiers.v1 as vf

from add_tool.servers.calc import CalcToolset


class AddData(vf.TaskData):
    answer: int = 0


class AddTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class AddTask(vf.Task[AddData, vf.State, AddTaskConfig]):
    @classmethod
    def toolsets(cls, config: AddTaskConfig) -> list[vf.Toolset]:
        return [CalcToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        messages = trace.assistant_messages
        text = (vf.types.content_text(messages[-1].content) or "") if messages else ""
        return 1.0 if str(self.data.answer) in text.split() else 0.0


class AddConfig(vf.TasksetConfig):
    task: AddTaskConfig = AddTaskConfig()


class AddToolTaskset(vf.Taskset[AddTask, AddConfig]):
    def load(self):
        for i in range(4):
            yield AddTask(AddData(id=f"add-{i}", prompt=f"Use the tool to add {i} and 7, then answer with the sum.",
                                  answer=i + 7), self.config.task)
