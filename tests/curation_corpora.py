"""Corpora a team might bring, built in code (nothing is downloaded): classical-Chinese-style and
English poems, short support replies, Python source files (the standard library's) and a dialogue of short speeches. The
cleaning tests check that the default profile keeps them, and the tokenizer tests learn from the
Chinese text. Deterministic for a given seed."""

import glob
import os
import random
import sysconfig
from typing import List

from pipeline.config import PROJECT_ROOT

# Characters of classical Chinese verse (nature, seasons, travel, feeling), about 400 distinct.
POETRY_CHARACTERS = (
    "春夏秋冬风花雪月山水江河湖海云雨霜露烟雾天地日星辰光影明暗清浊长短高低远近深浅"
    "孤独寒暖晴阴朝暮晨昏夜晓岁年时节旧新古今千万百十一二三两半几多少东西南北中上下"
    "前后左右里外门窗楼台亭阁桥路舟船帆马车城关塞村庄寺庙宫殿园林松竹梅兰菊柳桃李杏"
    "梧桐枫荷莲草木叶枝根林野田原峰岭谷溪泉潭池波浪涛沙石岸渡津浦洲岛鸟雁鹤莺燕鸦"
    "鹊鸿鸥猿鹿鱼龙虎蝉蝶蜂萤琴瑟笛箫鼓钟酒杯茶诗书画剑弓衣裳袖巾灯烛火炉香梦魂心"
    "意情思愁恨怨悲欢喜笑泪歌吟唱醉醒眠卧坐立行归去来往返望看见闻听问答语言声音色"
    "青红白黄绿紫碧翠金银玉珠锦绣客人君子故乡国家亲友兄弟妻儿老少童翁僧渔樵牧樵耕"
    "织谁何处自相独共同只唯犹尚未已将欲应须莫不无有是非为以与于而之其此彼所若如似"
    "犹若空满尽初终始忽渐遥迢寂寞苍茫萧瑟潇洒徘徊惆怅缥缈依稀冷落凄凉繁华荒芜飘零"
    "流转回环盘旋飞落开谢生死别离逢送迎留住居游览登临眺攀渡涉泛浮沉卷舒吹拂洒滴照"
    "映临横斜倚傍绕穿隔连接断续闭启凭遗忆念怜惜叹息寻觅收拾安宁静动闲忙病瘦肥轻重"
)
POETRY_PUNCTUATION = ("，", "。")
ENGLISH_POEM_WORDS = (
    "river light evening stone willow moon harbour lantern winter garden silver field bell "
    "shadow quiet morning rain window orchard heron meadow thistle candle ember hollow ridge "
    "crow linen salt tide ferry hearth snow pine valley dusk dawn mist frost bough sparrow"
).split()
ENGLISH_POEM_VERBS = "keeps holds carries hides wakes follows remembers folds gathers calls".split()


def chinese_poems(count: int, seed: int = 0) -> List[str]:
    """Quatrains and regulated verse: 4 or 8 lines of 5 or 7 characters, one line per row."""
    rng = random.Random(seed)
    poems = []
    for _ in range(count):
        length, lines = rng.choice((5, 7)), rng.choice((4, 8))
        rows = [
            "".join(rng.choice(POETRY_CHARACTERS) for _ in range(length)) + POETRY_PUNCTUATION[i % 2]
            for i in range(lines)
        ]
        poems.append("\n".join(rows))
    return poems


def english_poems(count: int, seed: int = 0) -> List[str]:
    """Short stanzas of short lines (what FineWeb's short-line rule removes)."""
    rng = random.Random(seed)
    poems = []
    for _ in range(count):
        rows = [
            f"the {rng.choice(ENGLISH_POEM_WORDS)} {rng.choice(ENGLISH_POEM_VERBS)} "
            f"{rng.choice(('the', 'a', 'my', 'our'))} {rng.choice(ENGLISH_POEM_WORDS)}"
            for _ in range(4)
        ]
        rows[-1] += rng.choice((".", ",", "", "!"))
        poems.append("\n".join(rows))
    return poems


def poetry(count: int, seed: int = 0) -> List[str]:
    """Chinese and English poems, half each."""
    return chinese_poems(count - count // 2, seed) + english_poems(count // 2, seed)


def support_replies(count: int) -> List[str]:
    """The first `count` documents of the bundled corpus (short support replies)."""
    with open(os.path.join(PROJECT_ROOT, "data", "corpus", "support_replies.txt"), encoding="utf-8") as handle:
        documents = [document.strip() for document in handle.read().split("\n\n") if document.strip()]
    return documents[:count]


STDLIB_PACKAGES = ("email", "json", "http", "logging", "urllib", "concurrent/futures", "importlib", "xml/dom")


def python_sources(count: int) -> List[str]:
    """Python source files of the standard library (a few of its packages), one file per document."""
    stdlib = sysconfig.get_paths()["stdlib"]
    paths = sorted(path for package in STDLIB_PACKAGES for path in glob.glob(os.path.join(stdlib, package, "*.py")))
    sources = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        if 200 < len(text) < 40_000:  # package markers are not source files; very long modules only cost time
            sources.append(text)
    return sources[:count]


_SPEAKERS = "ROMEO JULIET NURSE MERCUTIO BENVOLIO TYBALT CAPULET FRIAR PRINCE PARIS".split()
_OPENINGS = "Ay, No, Good, Why, O, Nay, Peace, Come, Well, Alas, Hark, Fie, Soft,".split()
_SUBJECTS = (
    "my lord",
    "sweet friend",
    "good nurse",
    "fair cousin",
    "the prince",
    "your father",
    "this night",
    "that man",
    "the morning",
    "my heart",
    "thy sword",
    "her window",
    "the watch",
    "our house",
)
_PREDICATES = (
    "will not stay",
    "is gone to bed",
    "speaks too fast",
    "must be patient",
    "comes this way",
    "doth protest too much",
    "is dead and buried",
    "shall hear of it",
    "was never so merry",
    "knows not what he says",
    "hath a fair face",
    "stands at the gate",
    "waits below",
    "is but a dream",
    "must away tonight",
    "would see thee",
)
_ENDINGS = (".", "!", "?", "...", ";")


def dialogue(count: int, seed: int = 0) -> List[str]:
    """Short speeches, one per document: a speaker's name and one to three short sentences."""
    rng = random.Random(seed)
    speeches = []
    for _ in range(count):
        sentences = [
            f"{rng.choice(_OPENINGS)} {rng.choice(_SUBJECTS)} {rng.choice(_PREDICATES)}{rng.choice(_ENDINGS)}"
            for _ in range(rng.randint(1, 3))
        ]
        speeches.append(f"{rng.choice(_SPEAKERS)}:\n" + "\n".join(sentences))
    return speeches
