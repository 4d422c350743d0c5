"""Numbers, times and durations as people say them, and the answer keys that match them.

Scripts are spoken, so numbers are written as words ("twenty-five dollars", "nine
fifteen"); answer keys list the forms a transcript may contain (words and digits).
"""

from __future__ import annotations

_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_ORD = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
        "nine": "ninth", "twelve": "twelfth"}


def words(n: int) -> str:
    """0..999999 in words, British style ("one hundred and twenty-five")."""
    if n < 0:
        return "minus " + words(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        t, o = divmod(n, 10)
        return _TENS[t] + ("" if o == 0 else "-" + _ONES[o])
    if n < 1000:
        h, r = divmod(n, 100)
        return _ONES[h] + " hundred" + ("" if r == 0 else " and " + words(r))
    if n < 1_000_000:
        th, r = divmod(n, 1000)
        if r == 0:
            return words(th) + " thousand"
        return words(th) + " thousand" + (" and " if r < 100 else " ") + words(r)
    raise ValueError(f"{n} is too large to say")


def ordinal(n: int) -> str:
    """1 -> "first", 21 -> "twenty-first"."""
    w = words(n)
    head, sep, last = w.rpartition("-") if "-" in w else ("", "", w)
    if last in _ORD:
        last = _ORD[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last = last + "th"
    return head + sep + last


def ordinal_digits(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def number_keys(n: int) -> list[str]:
    """Forms of ``n`` a transcript may contain: words (hyphenated or not) and digits."""
    w = words(n)
    forms = [w, w.replace("-", " "), str(n)]
    if n >= 1000:
        forms.append(f"{n:,}")
    return _dedup(forms)


def _hour12(minutes: int) -> tuple[int, int]:
    h, m = divmod(minutes % (24 * 60), 60)
    h12 = h % 12 or 12
    return h12, m


def say_time(minutes: int) -> str:
    """Minutes after midnight as spoken on a 12-hour clock: "nine fifteen", "ten o'clock"."""
    if minutes % (24 * 60) == 12 * 60:
        return "noon"
    h, m = _hour12(minutes)
    if m == 0:
        return f"{words(h)} o'clock"
    if m < 10:
        return f"{words(h)} oh {words(m)}"
    return f"{words(h)} {words(m)}"


def time_keys(minutes: int) -> list[str]:
    h, m = _hour12(minutes)
    forms = [f"{h}:{m:02d}", f"{h}.{m:02d}", f"{h}{m:02d}"]
    if m == 0:
        forms += [f"{words(h)} o'clock", f"{h} o'clock", f"{words(h)} o clock"]
        if minutes % (24 * 60) == 12 * 60:
            forms += ["noon", "midday", "twelve"]
    elif m < 10:
        forms += [f"{words(h)} oh {words(m)}", f"{words(h)} o {words(m)}"]
    else:
        forms += [f"{words(h)} {words(m)}", f"{words(h)} {words(m).replace('-', ' ')}"]
    if m == 30:
        forms += [f"half past {words(h)}"]
    if m == 15:
        forms += [f"quarter past {words(h)}"]
    if m == 45:
        forms += [f"quarter to {words(h % 12 + 1)}"]
    return _dedup(forms)


def say_duration(minutes: int) -> str:
    """45 -> "forty-five minutes", 90 -> "an hour and a half", 135 -> "two hours and fifteen minutes"."""
    h, m = divmod(minutes, 60)
    if h == 0:
        return f"{words(m)} minutes"
    hours = "an hour" if h == 1 else f"{words(h)} hours"
    if m == 0:
        return hours
    if m == 30:
        return "an hour and a half" if h == 1 else f"{words(h)} and a half hours"
    return f"{hours} and {words(m)} minutes"


def hours_phrase(half_hours: int) -> str:
    """Half-hour counts as spoken: 5 -> "two and a half hours", 2 -> "an hour"."""
    h, half = divmod(half_hours, 2)
    if h == 0:
        return "half an hour"
    base = "an hour" if h == 1 and not half else f"{words(h)} hours"
    if half:
        base = ("an hour and a half" if h == 1 else f"{words(h)} and a half hours")
    return base


def hours_keys(half_hours: int) -> list[str]:
    h, half = divmod(half_hours, 2)
    if not half:
        return number_keys(h) + (["an hour", "one hour"] if h == 1 else [])
    return _dedup([f"{words(h)} and a half", f"{h} and a half", f"{h}.5", f"{h}½",
                   *(["an hour and a half", "one and a half", "90 minutes", "ninety minutes"] if h == 1 else [])])


def money(n: int) -> str:
    return f"{words(n)} dollars"


def join_list(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _dedup(xs: list[str]) -> list[str]:
    out: list[str] = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out
