"""The words benchmark messages are made of: one pool of names, places, foods, hobbies... (English and
Chinese) for every template of every benchmark, filled from a seeded `random.Random`."""

from __future__ import annotations

import random

POOLS: dict[str, list[str]] = {
    "name_en": ["Emma", "Liam", "Olivia", "Noah", "Sophia", "Lucas", "Mia", "Ethan", "Chloe", "Daniel", "Grace"],
    "name_zh": ["小雨", "阿杰", "丽丽", "王磊", "陈晨", "刘洋", "张伟", "思琪", "浩然", "雅婷", "子涵", "一鸣"],
    "city_en": ["Shanghai", "Berlin", "Toronto", "Osaka", "Lisbon", "Melbourne", "Chengdu", "Seattle", "Hangzhou"],
    "city_zh": ["上海", "北京", "成都", "杭州", "深圳", "广州", "南京", "西安", "重庆", "苏州", "厦门", "武汉"],
    "relation_en": ["sister", "brother", "mother", "father", "best friend", "roommate", "manager", "cousin"],
    "relation_zh": ["妹妹", "哥哥", "妈妈", "爸爸", "好朋友", "室友", "领导", "表姐", "奶奶", "同事"],
    "food_en": ["ramen", "tiramisu", "spicy hotpot", "sushi", "dumplings", "pad thai", "croissants", "cheesecake"],
    "food_zh": ["火锅", "小笼包", "麻辣烫", "草莓蛋糕", "牛肉面", "煎饼果子", "烤鸭", "酸菜鱼", "螺蛳粉"],
    "hobby_en": [
        "rock climbing",
        "watercolor painting",
        "playing the guitar",
        "baking sourdough",
        "photography",
        "long-distance running",
        "chess",
        "knitting",
        "learning Japanese",
        "gardening",
    ],
    "hobby_zh": ["弹钢琴", "打羽毛球", "画水彩", "拍照", "夜跑", "做手账", "拼乐高", "学日语", "养多肉", "写毛笔字"],
    "job_en": [
        "nurse",
        "software engineer",
        "graphic designer",
        "high-school teacher",
        "accountant",
        "barista",
        "PhD student",
        "product manager",
        "architect",
        "translator",
    ],
    "job_zh": ["护士", "程序员", "设计师", "老师", "会计", "研究生", "产品经理", "建筑师", "翻译", "销售"],
    "pet_en": [
        "a ginger cat named Mochi",
        "a corgi named Biscuit",
        "two goldfish",
        "a parrot called Kiwi",
        "a rescue greyhound named Luna",
        "a hamster called Peanut",
    ],
    "pet_zh": [
        "一只叫团子的橘猫",
        "一只叫豆豆的柯基",
        "两条金鱼",
        "一只叫咪咪的布偶猫",
        "一只仓鼠",
        "一只叫旺财的柴犬",
    ],
    "allergen_en": ["peanuts", "shellfish", "cat hair", "pollen", "penicillin", "lactose"],
    "allergen_zh": ["花生", "海鲜", "猫毛", "花粉", "芒果", "牛奶"],
    "drink_en": ["black coffee", "oat latte", "green tea", "a fruit smoothie", "hot chocolate"],
    "drink_zh": ["美式咖啡", "豆浆", "绿茶", "奶茶", "蜂蜜水"],
    "exam_en": ["IELTS", "driving", "CPA", "GRE", "JLPT N2", "piano grade 8"],
    "exam_zh": ["雅思", "驾照科目二", "考研", "教师资格证", "日语N2", "注册会计师"],
    "band": ["Coldplay", "五月天", "Radiohead", "周杰伦", "Taylor Swift", "陈奕迅", "Arctic Monkeys", "告五人"],
    "weekday_en": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "weekday_zh": ["周一", "周二", "周三", "周四", "周五", "周六", "周日"],
    "month_en": [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ],
    "color_zh": ["白色", "黑色", "墨绿色", "浅蓝色", "红色"],
    "place_zh": ["西湖", "江边", "植物园", "老城区", "海边", "森林公园"],
}


def slots(rng: random.Random, user: str = "Alice") -> dict[str, str]:
    """One random value for every slot of a template (`{user}` is the user's name)."""
    values = {key: rng.choice(pool) for key, pool in POOLS.items()}
    values["food_en2"] = rng.choice([food for food in POOLS["food_en"] if food != values["food_en"]])
    values["food_zh2"] = rng.choice([food for food in POOLS["food_zh"] if food != values["food_zh"]])
    values.update(
        user=user,
        year=str(rng.randint(2012, 2024)),
        hour=str(rng.randint(5, 9)),
        n=str(rng.randint(1, 14)),
        day=str(rng.randint(1, 28)),
        month_n=str(rng.randint(1, 12)),
        late=rng.choice(["midnight", "1 am", "2 am", "half past one"]),
        late_zh=rng.choice(["十二点", "凌晨一点", "凌晨两点", "一点半"]),
    )
    return values
