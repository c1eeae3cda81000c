"""Small talk: whether a user's message, in its context, says nothing the memory could learn.

The monitor (a second model call after each turn) is spared a turn whose message is only an acknowledgement,
a laugh, a thanks, a greeting or a friendly emoji ("ok", "haha", "thanks!", "好的", "哈哈哈", "👍"). The rule is
built to miss no fact, so it spares only what it is sure of:

- every word of the message must be one of a closed list of such words, and nothing else may be in it: no other
  word, no digit (a number, a date), no question mark (a question the monitor should see), no emoji outside a
  short list of friendly ones (a crying face says how the user feels); a negation ("no", "不") is never on the list;
- a message that answers the companion is not small talk: after a message of the companion's that asks or
  proposes something ("are you moving?", "let's talk tomorrow", "要不要…", "…吧"), nothing is spared (a "yes", an
  "ok", even a "👍" is then the answer); after one that speaks about the user ("you must be exhausted"), a
  confirmation ("yes", "right", "嗯", "对") is not spared either.
"""

from __future__ import annotations

import re
import unicodedata

# Words that acknowledge, laugh, thank or greet: they say nothing of the user whatever came before, unless they
# answer a question or an offer. Each is a pattern over one lower-case word (letters may be drawn out: "okkk").
_LATIN_ACKNOWLEDGEMENTS = (
    r"o+k+(?:a+y+|i+e+|e+y+)?|k+|a+l+r+i+g+h+t+|fine|co+l|ni+ce+|great|good|awesome|perfect|lovely|sweet|noted"
    r"|wo+w+|wh?oa+h?|o+h+|a+h+|a*ha+|(?:ha)+h?|(?:he)+h?|(?:hi)+h?|lo+l+|lmf?a+o+|rofl|x+d+|hm+|m+|u+m+|u+h+"
    r"|ya+y+|tha+nks*|thx|ty|tysm|hi+|he+y+|hello+|yo+|bye+|byebye|cya|gn|gm|nite|night|morning|np"
)
# Words that confirm: after a message about the user ("you must be tired"), they say that it is so.
_LATIN_CONFIRMATIONS = r"ye+s+|ye+a+h*|ye+p+|yu+p+|ya+|true|indeed|exactly|right|correct|sure+|definitely"
# Set phrases, taken out whole before the words are looked at (their words alone are not all on the lists).
_LATIN_PHRASES = (
    "thank you",
    "thank u",
    "thanks a lot",
    "thanks so much",
    "thank you so much",
    "good night",
    "good morning",
    "see you",
    "see ya",
    "got it",
    "i see",
    "no problem",
    "no worries",
    "sounds good",
    "all good",
    "fair enough",
    "oh well",
    "you too",
)
_CJK_ACKNOWLEDGEMENTS = (
    "好的 好滴 好哒 好嘞 好吧 好 行 可以 收到 知道了 明白 了解 懂了 不错 厉害 赞 棒 酷 谢谢 谢啦 谢了 多谢 感谢 "
    "晚安 早安 午安 早 拜拜 再见 哈 嘿 嘻 哇 哦 噢 喔 啊 呀 啦 呐 哟 诶 欸 额 呃 嘛 了 哒 滴 耶"
).split()
_CJK_CONFIRMATIONS = "是的 对的 没错 对 是 嗯 恩 确实".split()
# Friendly emoji: a laugh, a smile, a heart, thanks, a wave. A sad, angry or sick face says something: not here.
_FRIENDLY_EMOJI = set("😂🤣😄😃😀😁😆😅😊🙂😉😌😋😘🥰😍🤗❤♥💕💖💗💓✨🎉👏🙌🙏👋💪😎🥳😸😹")
_CONFIRMING_EMOJI = set("👍👌✅✔☑")

# What makes a companion's message one that waits for an answer: a question, or an offer or a proposal.
_ASKS_OR_OFFERS = re.compile(
    r"[?？]|吗|呢|么|吧|要不要|好不好|是不是|对不对|可不可以|能不能|一起|我们|提醒"
    r"|\b(?:let'?s|let us|shall|should|how about|what about|want|wanna|would|could|can|do you|did you|are you"
    r"|will you|remind|we|then|right|huh|eh)\b|\bok(?:ay)?\W*$",
    re.IGNORECASE,
)
_ABOUT_THE_USER = re.compile(r"\b(?:you|your|you're|yours|u|ur)\b|你|您|主人", re.IGNORECASE)

_ACKNOWLEDGEMENT = re.compile(rf"(?:{_LATIN_ACKNOWLEDGEMENTS})")
_CONFIRMATION = re.compile(rf"(?:{_LATIN_CONFIRMATIONS})")
_PHRASE = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(_LATIN_PHRASES, key=len, reverse=True))) + r")\b")
_CJK_WORDS = sorted(_CJK_ACKNOWLEDGEMENTS + _CJK_CONFIRMATIONS, key=len, reverse=True)
_CJK_RUN = re.compile(rf"(?:{'|'.join(_CJK_WORDS)})+")
_CJK_CONFIRMING = re.compile("|".join(_CJK_CONFIRMATIONS))
_LATIN_WORD = re.compile(r"[a-z']+|[^\sa-z]+")


def nothing_to_learn(said: str, before: str | None) -> bool:
    """Whether the user's message `said`, after the companion's message `before` (None: none came before in
    the conversation), is small talk the monitor need not see."""
    kind = _small_talk(said)
    if kind is None:
        return False
    if before is None:
        return True
    if _ASKS_OR_OFFERS.search(before):
        return False  # the message answers: a "yes", an "ok", a "👍" is the answer
    return kind == "acknowledges" or not _ABOUT_THE_USER.search(before)


def _small_talk(said: str) -> str | None:
    """ "acknowledges" or "confirms" if the message is only words of the lists and friendly emoji, else None."""
    kept: list[str] = []
    emoji: set[str] = set()
    for char in unicodedata.normalize("NFKC", said).lower():
        category = unicodedata.category(char)
        if char in _FRIENDLY_EMOJI or char in _CONFIRMING_EMOJI:
            emoji.add(char)
            kept.append(" ")
        elif char.isspace() or char == "~" or (category.startswith("P") and char != "?"):
            kept.append(" ")
        elif category in ("Cf", "Mn", "Sk"):  # zero-width joiners, variation selectors, skin tones
            continue
        elif category.startswith("L"):
            kept.append(char)
        else:  # a digit, a question mark, another symbol or emoji: it may say something
            return None
    text = "".join(kept)
    phrases = len(_PHRASE.findall(text))
    tokens = _LATIN_WORD.findall(_PHRASE.sub(" ", text))
    if not (emoji or phrases or tokens):
        return None  # empty, or punctuation only: not sure it says nothing
    confirms = bool(emoji & _CONFIRMING_EMOJI)
    for token in tokens:
        if token.isascii():
            if _CONFIRMATION.fullmatch(token):
                confirms = True
            elif not _ACKNOWLEDGEMENT.fullmatch(token):
                return None
        elif _CJK_RUN.fullmatch(token):
            confirms = confirms or _CJK_CONFIRMING.search(token) is not None
        else:
            return None
    return "confirms" if confirms else "acknowledges"
