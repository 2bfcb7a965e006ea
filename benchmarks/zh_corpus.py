"""A synthetic Chinese corpus for the tokenizer benchmark (no download, deterministic).

Paragraphs of sentences built from about 300 common Chinese words drawn with a Zipf-like
distribution, with Chinese punctuation and occasional digits and Latin product names. It is not
natural text: it exercises CJK handling (multi-byte characters, no spaces, byte fallback for rare
characters) at a realistic character distribution, but its compression numbers are those of this
synthetic text, not of real Chinese.
"""

import random
from typing import List

WORDS = (
    "的 了 是 在 我 有 和 就 不 人 都 一 一个 上 也 很 到 说 要 去 你 会 着 没有 看 好 自己 这 那 他 她 我们 你们 他们 "
    "什么 时候 因为 所以 但是 如果 已经 还是 可以 需要 问题 服务 客户 感谢 您好 谢谢 抱歉 请 帮助 支持 联系 回复 邮件 "
    "电话 账户 密码 登录 设置 同步 更新 版本 应用 手机 电脑 文件 笔记 数据 备份 恢复 删除 保存 打开 关闭 选择 点击 "
    "页面 按钮 菜单 功能 系统 网络 连接 错误 提示 信息 时间 今天 明天 昨天 分钟 小时 工作日 尽快 处理 解决 检查 确认 "
    "订单 付款 退款 发票 价格 订阅 会员 免费 升级 取消 申请 提交 审核 通过 成功 失败 原因 方法 步骤 首先 然后 最后 "
    "另外 同时 注意 建议 希望 相信 理解 非常 特别 重要 简单 方便 安全 隐私 政策 条款 规定 团队 工程师 同事 经理 "
    "部门 公司 产品 质量 体验 反馈 意见 满意 评价 问题单 编号 记录 历史 最近 之前 之后 现在 马上 一直 经常 有时 "
    "春天 夏天 秋天 冬天 天气 城市 北京 上海 广州 深圳 学校 学生 老师 朋友 家人 孩子 父母 生活 学习 工作 休息 "
    "吃饭 喝茶 咖啡 音乐 电影 书 故事 世界 中国 国家 社会 经济 发展 技术 科学 研究 文化 历史 语言 文字 声音 颜色 "
    "山 水 风 雨 雪 花 树 月亮 太阳 星星 大海 河流 道路 房子 门 窗 桌子 椅子 灯 心 手 眼睛 头 身体 健康 快乐 "
    "幸福 安静 美丽 温暖 寒冷 清楚 明白 知道 觉得 认为 发现 开始 结束 继续 完成 准备 等待 出现 变化 增加 减少"
).split()
PUNCTUATION = ("，", "，", "，", "。", "。", "；", "：", "、", "！", "？")
NAMES = ("Lumen Notes", "iOS", "Android", "Windows", "macOS", "Wi-Fi", "PDF", "App")


def generate(num_bytes: int = 1_000_000, seed: int = 7) -> List[str]:
    """Paragraphs (documents) of synthetic Chinese text, about `num_bytes` UTF-8 bytes in all."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(WORDS))]
    documents, total = [], 0
    while total < num_bytes:
        sentences = []
        for _ in range(rng.randint(2, 8)):
            parts = rng.choices(WORDS, weights, k=rng.randint(4, 16))
            if rng.random() < 0.15:
                parts.insert(rng.randrange(len(parts)), rng.choice(NAMES))
            if rng.random() < 0.1:
                parts.append(str(rng.randint(1, 2030)))
            sentences.append("".join(parts) + rng.choice(PUNCTUATION))
        document = "".join(sentences)
        documents.append(document)
        total += len(document.encode("utf-8"))
    return documents
