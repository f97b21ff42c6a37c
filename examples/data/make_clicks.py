#!/usr/bin/env python3
"""Writes a seeded synthetic click dataset for examples/jobs/recommender.json.

    examples/data/make_clicks.py OUT_DIR [--users 2000] [--items 500]
        [--train 200000] [--test 20000] [--groups 4] [--seed 27]

Planted structure: every user and every item belongs to one of K latent
groups (uniformly at random). A row is a (user, item) pair: the user is drawn
uniformly, and the item from the user's group with probability 1/2, else from
another group. The pair is clicked with probability P_MATCH = 0.90 when the
groups match and P_OTHER = 0.15 when they do not, so the best any model can do
(knowing the groups) is to predict "click" exactly for matching pairs: the
Bayes rate is 0.5 * 0.90 + 0.5 * (1 - 0.15) = 0.875. The script prints it and
the Bayes-optimal classifier's accuracy on the written test set.

Files: OUT_DIR/train.csv and OUT_DIR/test.csv, header "user,item,click",
integer cells (ids from 0). Standard library only; the same seed writes the
same bytes.
"""
import argparse
import os
import random
import sys

P_MATCH = 0.90
P_OTHER = 0.15


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--users", type=int, default=2000)
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--train", type=int, default=200000)
    ap.add_argument("--test", type=int, default=20000)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--seed", type=int, default=27)
    a = ap.parse_args(argv)
    if a.groups < 2 or a.users < a.groups or a.items < a.groups:
        ap.error("need --groups >= 2 and at least one user and item per group")

    rng = random.Random(a.seed)
    # Every group gets at least one item (so a matching item always exists).
    user_group = [rng.randrange(a.groups) for _ in range(a.users)]
    item_group = list(range(a.groups)) + [rng.randrange(a.groups)
                                           for _ in range(a.items - a.groups)]
    rng.shuffle(item_group)
    items_of = [[] for _ in range(a.groups)]
    for i, g in enumerate(item_group):
        items_of[g].append(i)
    others_of = [[i for i in range(a.items) if item_group[i] != g] for g in range(a.groups)]

    bayes = 0.5 * P_MATCH + 0.5 * (1.0 - P_OTHER)
    os.makedirs(a.out_dir, exist_ok=True)
    for name, rows in (("train", a.train), ("test", a.test)):
        clicks = optimal_right = 0
        with open(os.path.join(a.out_dir, name + ".csv"), "w", newline="\n") as f:
            f.write("user,item,click\n")
            for _ in range(rows):
                u = rng.randrange(a.users)
                g = user_group[u]
                match = rng.random() < 0.5
                i = rng.choice(items_of[g] if match else others_of[g])
                click = int(rng.random() < (P_MATCH if match else P_OTHER))
                clicks += click
                optimal_right += int(click == int(match))
                f.write("%d,%d,%d\n" % (u, i, click))
        print("%s: %d rows, click rate %.3f, Bayes-optimal accuracy on it %.4f"
              % (os.path.join(a.out_dir, name + ".csv"), rows, clicks / max(rows, 1),
                 optimal_right / max(rows, 1)))
    print("Bayes rate (expected accuracy of the optimal classifier): %.4f" % bayes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
