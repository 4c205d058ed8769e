#include "data/math_gen.h"

#include <cstdlib>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "core/rng.h"
#include "data/text_util.h"

namespace dspark::data {

namespace {

struct Reject {};  // the drawn numbers do not print exactly; draw again

enum class Fmt { Int, Dec, Money, Frac };

std::string show(Rational v, Fmt f) {
  switch (f) {
    case Fmt::Int:
      if (!v.is_integer()) throw Reject{};
      return std::to_string(v.n);
    case Fmt::Dec: {
      const int p = decimal_places(v, 2);
      if (p < 0) throw Reject{};
      return decimal_string(v, p);
    }
    case Fmt::Money: {
      if (v < Rational(0)) throw Reject{};
      if (v.is_integer()) return "$" + std::to_string(v.n);
      if (decimal_places(v, 2) < 0) throw Reject{};
      return "$" + decimal_string(v, 2);
    }
    case Fmt::Frac:
      return v.is_integer() ? std::to_string(v.n) : std::to_string(v.n) + "/" + std::to_string(v.d);
  }
  return {};
}

struct Num {
  Rational v;
  Fmt f = Fmt::Dec;
};
Num I(Rational v) {
  return {v, Fmt::Int};
}
Num D(Rational v) {
  return {v, Fmt::Dec};
}
Num M(Rational v) {
  return {v, Fmt::Money};
}
Num F(Rational v) {
  return {v, Fmt::Frac};
}

struct Person {
  const char* name;
  const char* subj;  // he / she
  const char* obj;   // him / her
  const char* poss;  // his / her
};

const std::vector<Person>& people() {
  static const std::vector<Person> p = {
      {"Ava", "she", "her", "her"},    {"Ben", "he", "him", "his"},
      {"Chloe", "she", "her", "her"},  {"Daniel", "he", "him", "his"},
      {"Elena", "she", "her", "her"},  {"Farid", "he", "him", "his"},
      {"Grace", "she", "her", "her"},  {"Hiro", "he", "him", "his"},
      {"Isla", "she", "her", "her"},   {"Jamal", "he", "him", "his"},
      {"Keiko", "she", "her", "her"},  {"Liam", "he", "him", "his"},
      {"Maya", "she", "her", "her"},   {"Noah", "he", "him", "his"},
      {"Olivia", "she", "her", "her"}, {"Pedro", "he", "him", "his"},
      {"Quinn", "she", "her", "her"},  {"Ravi", "he", "him", "his"},
      {"Sofia", "she", "her", "her"},  {"Tomas", "he", "him", "his"},
      {"Uma", "she", "her", "her"},    {"Victor", "he", "him", "his"},
      {"Wen", "she", "her", "her"},    {"Xavier", "he", "him", "his"},
      {"Yara", "she", "her", "her"},   {"Zane", "he", "him", "his"},
      {"Amara", "she", "her", "her"},  {"Bruno", "he", "him", "his"},
      {"Carmen", "she", "her", "her"}, {"Dmitri", "he", "him", "his"},
      {"Fatima", "she", "her", "her"}, {"Gabriel", "he", "him", "his"},
      {"Hannah", "she", "her", "her"}, {"Ibrahim", "he", "him", "his"},
      {"Julia", "she", "her", "her"},  {"Kofi", "he", "him", "his"},
      {"Lucia", "she", "her", "her"},  {"Mateo", "he", "him", "his"},
      {"Nadia", "she", "her", "her"},  {"Oscar", "he", "him", "his"},
  };
  return p;
}

// "a office" -> "an office".
std::string a_an(const std::string& word) {
  const char c = word.empty() ? 'x' : word[0];
  const bool vowel = c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u' || c == 'A' ||
                     c == 'E' || c == 'I' || c == 'O' || c == 'U';
  return (vowel ? "an " : "a ") + word;
}

std::string cap(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = char(s[0] - 'a' + 'A');
  return s;
}

struct Countable {
  const char* one;
  const char* many;
};
const std::vector<Countable>& countables() {
  static const std::vector<Countable> c = {
      {"marble", "marbles"},         {"sticker", "stickers"},
      {"apple", "apples"},           {"book", "books"},
      {"pencil", "pencils"},         {"trading card", "trading cards"},
      {"seashell", "seashells"},     {"stamp", "stamps"},
      {"cookie", "cookies"},         {"coin", "coins"},
      {"balloon", "balloons"},       {"toy car", "toy cars"},
      {"comic book", "comic books"}, {"bead", "beads"},
      {"flower", "flowers"},         {"crayon", "crayons"},
      {"button", "buttons"},         {"postcard", "postcards"},
  };
  return c;
}

struct ShopItem {
  const char* one;
  const char* many;
  int lo, hi;  // price range in cents
};
const std::vector<ShopItem>& shop_items() {
  static const std::vector<ShopItem> s = {
      {"notebook", "notebooks", 120, 480},
      {"pen", "pens", 60, 250},
      {"sandwich", "sandwiches", 350, 950},
      {"apple", "apples", 35, 120},
      {"loaf of bread", "loaves of bread", 180, 520},
      {"bottle of juice", "bottles of juice", 110, 390},
      {"T-shirt", "T-shirts", 800, 2500},
      {"ticket", "tickets", 450, 1800},
      {"bag of rice", "bags of rice", 190, 890},
      {"box of crayons", "boxes of crayons", 140, 460},
      {"cup of coffee", "cups of coffee", 180, 560},
      {"bunch of bananas", "bunches of bananas", 99, 349},
      {"paperback", "paperbacks", 499, 1499},
      {"light bulb", "light bulbs", 125, 675},
      {"jar of honey", "jars of honey", 350, 990},
      {"pack of batteries", "packs of batteries", 299, 899},
  };
  return s;
}

// The worked solution, one step per line.
class Work {
 public:
  // Writes "<label><x0> op <x1> ... = <result><unit>." and returns the result. `ops` uses + - * /
  // and must be all additive or all multiplicative, so left-to-right order is the usual order.
  Rational calc(const std::string& label, const std::vector<Num>& xs, const std::string& ops,
                Fmt rf, const std::string& unit = "") {
    if (xs.size() != ops.size() + 1) throw std::logic_error("calc: operand/operator count");
    bool add = false, mul = false;
    for (const char o : ops) (o == '+' || o == '-' ? add : mul) = true;
    if (add && mul) throw std::logic_error("calc: mixed precedence");
    Rational v = xs[0].v;
    std::string s = label + show(xs[0].v, xs[0].f);
    for (size_t i = 0; i < ops.size(); ++i) {
      const Rational x = xs[i + 1].v;
      switch (ops[i]) {
        case '+':
          v = v + x;
          s += " + ";
          break;
        case '-':
          v = v - x;
          s += " - ";
          break;
        case '*':
          v = v * x;
          s += " × ";
          break;
        case '/':
          v = v / x;
          s += " ÷ ";
          break;
        default:
          throw std::logic_error("calc: operator");
      }
      s += show(x, xs[i + 1].f);
    }
    std::string u = unit;
    if (v == Rational(1) && u == "hours") u = "hour";
    s += " = " + show(v, rf) + (u.empty() ? "" : u == "%" ? u : " " + u) + ".";
    lines_.push_back(s);
    return v;
  }
  void say(const std::string& s) { lines_.push_back(s); }
  std::string text() const {
    std::string out;
    for (const auto& l : lines_) out += l + "\n";
    return out;
  }

 private:
  std::vector<std::string> lines_;
};

struct Ctx {
  Rng& rng;
  MathProblem& p;
  Work w;
  Fmt fmt = Fmt::Dec;  // how the answer prints
  int64_t r(int64_t lo, int64_t hi) { return rng.range(lo, hi); }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return rng.pick(v);
  }
  const char* pick(std::initializer_list<const char*> v) {
    return *(v.begin() + rng.below(v.size()));
  }
  Rational param(const std::string& name, Rational v) {
    p.params.emplace_back(name, v);
    return v;
  }
  std::pair<Person, Person> two_people() {
    const Person& a = pick(people());
    const Person* b;
    do b = &pick(people());
    while (b->name == a.name);
    return {a, *b};
  }
};

// Each template fills question, params and the steps, and returns {step answer, closed form}.
using Template = std::pair<Rational, Rational> (*)(Ctx&);

std::pair<Rational, Rational> t_add_sub(Ctx& c) {
  auto [a, b] = c.two_people();
  const auto& it = c.pick(countables());
  const Rational start = c.param("start", c.r(12, 95));
  const Rational give = c.param("give", c.r(2, start.n - 3));
  const Rational more = c.param("more", c.r(3, 60));
  const std::string verb = c.pick({"buys", "finds", "is given", "wins"});
  c.p.question = std::string(a.name) + " has " + show(start, Fmt::Int) + " " + it.many + ". " +
                 cap(a.subj) + " gives " + show(give, Fmt::Int) + " of them to " + b.name +
                 " and then " + verb + " " + show(more, Fmt::Int) + " more. " +
                 c.pick({"How many ", "How many "}) + it.many + " does " + a.name + " have now?";
  const Rational left =
      c.w.calc("After giving some away: ", {I(start), I(give)}, "-", Fmt::Int, it.many);
  const Rational now = c.w.calc("After getting more: ", {I(left), I(more)}, "+", Fmt::Int, it.many);
  return {now, start - give + more};
}

std::pair<Rational, Rational> t_groups(Ctx& c) {
  const auto& it = c.pick(countables());
  const Person& a = c.pick(people());
  const Rational boxes = c.param("boxes", c.r(3, 24));
  const Rational per = c.param("per_box", c.r(4, 36));
  const Rational away = c.param("given_away", c.r(1, boxes.n * per.n - 1));
  const std::string container = c.pick({"boxes", "bags", "jars", "crates"});
  c.p.question = std::string(a.name) + " has " + show(boxes, Fmt::Int) + " " + container +
                 " with " + show(per, Fmt::Int) + " " + it.many + " in each. " + cap(a.subj) +
                 " gives away " + show(away, Fmt::Int) + " " + it.many + ". How many " + it.many +
                 " are left?";
  const Rational total =
      c.w.calc("Total at the start: ", {I(boxes), I(per)}, "*", Fmt::Int, it.many);
  const Rational left =
      c.w.calc("Left after giving some away: ", {I(total), I(away)}, "-", Fmt::Int, it.many);
  return {left, boxes * per - away};
}

std::pair<Rational, Rational> t_sharing(Ctx& c) {
  const Person& a = c.pick(people());
  const auto& it = c.pick(countables());
  const Rational friends = c.param("friends", c.r(2, 9));
  const Rational each = c.param("each_hidden", c.r(2, 25));
  const Rational kept = c.param("kept", c.r(1, 15));
  const Rational total = friends * each + kept;
  c.param("total", total);
  c.p.question = std::string(a.name) + " has " + show(total, Fmt::Int) + " " + it.many + ". " +
                 cap(a.subj) + " keeps " + show(kept, Fmt::Int) + " for " + a.obj +
                 "self and shares the rest equally among " + show(friends, Fmt::Int) +
                 " friends. How many " + it.many + " does each friend get?";
  const Rational rest = c.w.calc("To share: ", {I(total), I(kept)}, "-", Fmt::Int, it.many);
  const Rational got =
      c.w.calc("Each friend gets: ", {I(rest), I(friends)}, "/", Fmt::Int, it.many);
  return {got, (total - kept) / friends};
}

std::pair<Rational, Rational> t_shopping_change(Ctx& c) {
  const Person& a = c.pick(people());
  const ShopItem& x = c.pick(shop_items());
  const ShopItem* y;
  do y = &c.pick(shop_items());
  while (y->one == x.one);
  const Rational q1 = c.param("qty1", c.r(2, 6));
  const Rational p1 = c.param("price1", Rational::cents(c.r(x.lo, x.hi)));
  const Rational q2 = c.param("qty2", c.r(1, 4));
  const Rational p2 = c.param("price2", Rational::cents(c.r(y->lo, y->hi)));
  const Rational total = q1 * p1 + q2 * p2;
  Rational bill = 5;
  for (const int b : {5, 10, 20, 50, 100, 200})
    if (Rational(b) > total) {
      bill = b;
      break;
    }
  if (!(bill > total)) throw Reject{};
  c.param("paid", bill);
  const std::string y_name = q2 == Rational(1) ? y->one : y->many;
  c.fmt = Fmt::Money;
  c.p.question = std::string(a.name) + " buys " + show(q1, Fmt::Int) + " " + x.many + " at " +
                 show(p1, Fmt::Money) + " each and " + show(q2, Fmt::Int) + " " + y_name + " at " +
                 show(p2, Fmt::Money) + " each. " + cap(a.subj) + " pays with a " +
                 show(bill, Fmt::Money) + " bill. How much change does " + a.subj + " get?";
  const Rational c1 =
      c.w.calc(std::string("Cost of the ") + x.many + ": ", {I(q1), M(p1)}, "*", Fmt::Money);
  const Rational c2 = c.w.calc("Cost of the " + y_name + ": ", {I(q2), M(p2)}, "*", Fmt::Money);
  const Rational t = c.w.calc("Total cost: ", {M(c1), M(c2)}, "+", Fmt::Money);
  const Rational change = c.w.calc("Change: ", {M(bill), M(t)}, "-", Fmt::Money);
  return {change, bill - (q1 * p1 + q2 * p2)};
}

std::pair<Rational, Rational> t_discount(Ctx& c) {
  c.fmt = Fmt::Money;
  const ShopItem& x = c.pick(shop_items());
  const Rational price = c.param("price", Rational::cents(c.r(x.lo, x.hi) * c.r(1, 4)));
  const Rational pct =
      c.param("percent_off", c.pick(std::vector<int64_t>{5, 10, 15, 20, 25, 30, 40, 50}));
  c.p.question = cap(a_an(x.one)) + " normally costs " + show(price, Fmt::Money) +
                 ". It is on sale for " + show(pct, Fmt::Int) + "% off. " +
                 c.pick({"What is the sale price?", "How much does it cost during the sale?"});
  const Rational off = c.w.calc("Discount: ", {M(price), I(pct), I(100)}, "*/", Fmt::Money);
  const Rational sale = c.w.calc("Sale price: ", {M(price), M(off)}, "-", Fmt::Money);
  return {sale, price * (Rational(100) - pct) / 100};
}

std::pair<Rational, Rational> t_tax_total(Ctx& c) {
  c.fmt = Fmt::Money;
  const Person& a = c.pick(people());
  const ShopItem& x = c.pick(shop_items());
  const Rational n = c.param("qty", c.r(2, 12));
  const Rational price = c.param("price", Rational::cents(c.r(x.lo, x.hi)));
  const Rational tax = c.param("tax_percent", c.pick(std::vector<int64_t>{4, 5, 6, 8, 10, 20}));
  c.p.question = std::string(a.name) + " buys " + show(n, Fmt::Int) + " " + x.many + " for " +
                 show(price, Fmt::Money) + " each. Sales tax is " + show(tax, Fmt::Int) +
                 "%. What is the total including tax?";
  const Rational sub = c.w.calc("Before tax: ", {I(n), M(price)}, "*", Fmt::Money);
  const Rational t = c.w.calc("Tax: ", {M(sub), I(tax), I(100)}, "*/", Fmt::Money);
  const Rational total = c.w.calc("Total: ", {M(sub), M(t)}, "+", Fmt::Money);
  return {total, n * price * (Rational(100) + tax) / 100};
}

std::pair<Rational, Rational> t_unit_rate(Ctx& c) {
  c.fmt = Fmt::Money;
  const ShopItem& x = c.pick(shop_items());
  const Rational q1 = c.param("qty1", c.r(2, 8));
  const Rational unit = Rational::cents(c.r(x.lo, x.hi));
  const Rational cost1 = c.param("cost1", q1 * unit);
  Rational q2;
  do q2 = c.r(2, 15);
  while (q2 == q1);
  c.param("qty2", q2);
  c.p.question = show(q1, Fmt::Int) + " " + x.many + " cost " + show(cost1, Fmt::Money) +
                 ". At the same price per item, how much do " + show(q2, Fmt::Int) + " " + x.many +
                 " cost?";
  const Rational u =
      c.w.calc(std::string("Price of one ") + x.one + ": ", {M(cost1), I(q1)}, "/", Fmt::Money);
  const Rational t = c.w.calc(std::string("Price of ") + show(q2, Fmt::Int) + ": ", {M(u), I(q2)},
                              "*", Fmt::Money);
  return {t, cost1 * q2 / q1};
}

std::pair<Rational, Rational> t_distance(Ctx& c) {
  const char* vehicle = c.pick({"car", "train", "bus", "cyclist", "truck", "ferry"});
  const Rational speed = c.param("speed", c.r(4, 24) * 5);
  const Rational hours = c.param("hours", Rational(c.r(2, 14), 2));
  const Rational extra = c.param("extra_km", c.r(5, 90));
  c.p.question = cap(a_an(vehicle)) + " travels at " + show(speed, Fmt::Int) + " km/h for " +
                 show(hours, Fmt::Dec) + " hours, then another " + show(extra, Fmt::Int) +
                 " km. How many kilometres does it travel in total?";
  const Rational d1 = c.w.calc("Distance at constant speed (speed × time): ", {I(speed), D(hours)},
                               "*", Fmt::Dec, "km");
  const Rational d = c.w.calc("Total distance: ", {D(d1), I(extra)}, "+", Fmt::Dec, "km");
  return {d, speed * hours + extra};
}

std::pair<Rational, Rational> t_average_speed(Ctx& c) {
  const Person& a = c.pick(people());
  const Rational v1 = c.param("speed1", c.r(6, 20) * 5);
  const Rational t1 = c.param("hours1", c.r(1, 4));
  const Rational v2 = c.param("speed2", c.r(6, 20) * 5);
  const Rational t2 = c.param("hours2", c.r(1, 4));
  c.p.question = std::string(a.name) + " drives at " + show(v1, Fmt::Int) + " km/h for " +
                 show(t1, Fmt::Int) + (t1 == Rational(1) ? " hour" : " hours") + " and then at " +
                 show(v2, Fmt::Int) + " km/h for " + show(t2, Fmt::Int) +
                 (t2 == Rational(1) ? " hour" : " hours") + ". What is " + a.poss +
                 " average speed for the whole trip, in km/h?";
  const Rational d1 = c.w.calc("First part: ", {I(v1), I(t1)}, "*", Fmt::Dec, "km");
  const Rational d2 = c.w.calc("Second part: ", {I(v2), I(t2)}, "*", Fmt::Dec, "km");
  const Rational d = c.w.calc("Total distance: ", {D(d1), D(d2)}, "+", Fmt::Dec, "km");
  const Rational t = c.w.calc("Total time: ", {I(t1), I(t2)}, "+", Fmt::Dec, "hours");
  const Rational avg =
      c.w.calc("Average speed (distance ÷ time): ", {D(d), D(t)}, "/", Fmt::Dec, "km/h");
  return {avg, (v1 * t1 + v2 * t2) / (t1 + t2)};
}

std::pair<Rational, Rational> t_travel_time(Ctx& c) {
  const char* who =
      c.pick({"A train", "A bus", "A boat", "A cyclist", "A hiker", "A delivery van"});
  const Rational speed = c.param("speed", c.r(2, 24) * 5);
  const Rational minutes = c.r(3, 30) * 10;
  const Rational dist = c.param("distance", speed * minutes / 60);
  if (!dist.is_integer()) throw Reject{};
  c.p.question = std::string(who) + " covers " + show(dist, Fmt::Int) + " km at a steady " +
                 show(speed, Fmt::Int) + " km/h. How many minutes does the journey take?";
  const Rational h =
      c.w.calc("Time in hours (distance ÷ speed): ", {I(dist), I(speed)}, "/", Fmt::Dec, "hours");
  const Rational m = c.w.calc("Time in minutes: ", {D(h), I(60)}, "*", Fmt::Int, "minutes");
  return {m, dist * 60 / speed};
}

std::pair<Rational, Rational> t_work_rate(Ctx& c) {
  const char* thing = c.pick({"parts", "bottles", "boxes", "bricks", "pages", "cans"});
  const Rational r1 = c.param("rate1", c.r(4, 30) * 5);
  const Rational r2 = c.param("rate2", c.r(4, 30) * 5);
  const Rational hours = c.r(2, 12);
  const Rational n = c.param("total", (r1 + r2) * hours);
  c.p.question = std::string("One machine makes ") + show(r1, Fmt::Int) + " " + thing +
                 " per hour and another makes " + show(r2, Fmt::Int) + " " + thing +
                 " per hour. Working together, how many hours do they need to make " +
                 show(n, Fmt::Int) + " " + thing + "?";
  const Rational r = c.w.calc("Together per hour: ", {I(r1), I(r2)}, "+", Fmt::Int, thing);
  const Rational h = c.w.calc("Hours needed: ", {I(n), I(r)}, "/", Fmt::Dec, "hours");
  return {h, n / (r1 + r2)};
}

std::pair<Rational, Rational> t_percent_of(Ctx& c) {
  struct Group {
    const char *who, *first, *second, *second_q;
  };
  static const std::vector<Group> groups = {
      {"students in a school", "walk to school", "come by bus", "come by bus"},
      {"people at a concert", "bought their tickets online", "bought them at the door",
       "bought tickets at the door"},
      {"trees in a park", "are oaks", "are other kinds of tree", "are not oaks"},
      {"books in a library", "are novels", "are non-fiction", "are non-fiction"},
      {"members of a club", "are juniors", "are seniors", "are seniors"},
      {"cars in a car park", "are electric", "run on petrol", "run on petrol"},
  };
  const Group& g = c.pick(groups);
  const Rational n = c.param("total", c.r(2, 60) * 20);
  const Rational pct = c.param("percent", c.r(1, 19) * 5);
  const Rational part = n * pct / 100;
  if (!part.is_integer()) throw Reject{};
  c.p.question = std::string("There are ") + show(n, Fmt::Int) + " " + g.who + ". " +
                 show(pct, Fmt::Int) + "% of them " + g.first + " and the rest " + g.second +
                 ". How many " + g.second_q + "?";
  const Rational first =
      c.w.calc(std::string("Those who ") + g.first + ": ", {I(n), I(pct), I(100)}, "*/", Fmt::Int);
  const Rational second = c.w.calc("The rest: ", {I(n), I(first)}, "-", Fmt::Int);
  return {second, n * (Rational(100) - pct) / 100};
}

std::pair<Rational, Rational> t_percent_change(Ctx& c) {
  const char* what = c.pick({"the price of a bicycle", "a town's population", "the rent of a flat",
                             "the number of visitors to a museum", "a company's monthly sales"});
  const Rational before = c.param("before", c.r(4, 90) * 50);
  const Rational pct = c.param("percent_hidden", c.r(1, 12) * 5);
  const Rational after = before * (Rational(100) + pct) / 100;
  if (!after.is_integer()) throw Reject{};
  c.param("after", after);
  c.p.question = std::string("Last year ") + what + " was " + show(before, Fmt::Int) +
                 "; this year it is " + show(after, Fmt::Int) +
                 ". By what percentage did it increase?";
  const Rational diff = c.w.calc("Increase: ", {I(after), I(before)}, "-", Fmt::Int);
  const Rational pc = c.w.calc("As a percentage of the old value: ", {I(diff), I(before), I(100)},
                               "/*", Fmt::Dec, "%");
  return {pc, (after - before) * 100 / before};
}

std::pair<Rational, Rational> t_ages_multiple(Ctx& c) {
  auto [a, b] = c.two_people();
  const Rational m = c.param("times", c.r(2, 5));
  const Rational young = c.r(2, 14);
  const Rational years = c.param("years", c.r(2, 10));
  const Rational sum = c.param("sum_later", young * m + young + 2 * years);
  c.p.question = std::string(a.name) + " is " + show(m, Fmt::Int) + " times as old as " + b.name +
                 ". In " + show(years, Fmt::Int) + " years, the sum of their ages will be " +
                 show(sum, Fmt::Int) + ". How old is " + b.name + " now?";
  c.w.say(std::string("Let ") + b.name + "'s age now be x; then " + a.name + " is " +
          show(m, Fmt::Int) + "x.");
  const Rational parts = c.w.calc("Together they are ", {I(m), I(1)}, "+", Fmt::Int, "times x now");
  const Rational added = c.w.calc("In the future each is older, adding ", {I(years), I(years)}, "+",
                                  Fmt::Int, "years");
  const Rational rest = c.w.calc("So the ages now sum to ", {I(sum), I(added)}, "-", Fmt::Int);
  const Rational x =
      c.w.calc(std::string(b.name) + "'s age: ", {I(rest), I(parts)}, "/", Fmt::Int, "years");
  return {x, (sum - 2 * years) / (m + 1)};
}

std::pair<Rational, Rational> t_ages_difference(Ctx& c) {
  const char* pair = c.pick({"A mother and her son", "A father and his daughter",
                             "An aunt and her nephew", "A grandfather and his grandson"});
  const Rational child = c.r(3, 20);
  const Rational years = c.param("years", c.r(2, 15));
  const Rational diff = c.param("difference", child + years);
  c.p.question = std::string(pair) + ": the parent is " + show(diff, Fmt::Int) +
                 " years older than the child. In " + show(years, Fmt::Int) +
                 " years the parent will be twice as old as the child. How old is the parent now?";
  c.w.say(
      "In the future the parent is twice the child's age, so the age difference equals the child's "
      "future age.");
  c.w.say("Child's age then: " + show(diff, Fmt::Int) + " years.");
  const Rational now = c.w.calc("Child's age now: ", {I(diff), I(years)}, "-", Fmt::Int, "years");
  const Rational parent = c.w.calc("Parent's age now: ", {I(now), I(diff)}, "+", Fmt::Int, "years");
  return {parent, 2 * diff - years};
}

std::pair<Rational, Rational> t_fraction_add(Ctx& c) {
  c.fmt = Fmt::Frac;
  auto [a, b] = c.two_people();
  const char* food = c.pick({"pizza", "cake", "pie", "chocolate bar", "watermelon"});
  const std::vector<int64_t> dens = {2, 3, 4, 5, 6, 8, 10, 12};
  const int64_t d1 = c.pick(dens), d2 = c.pick(dens);
  const int64_t n1 = c.r(1, d1 - 1), n2 = c.r(1, d2 - 1);
  const Rational f1(n1, d1), f2(n2, d2);
  if (!(f1 + f2 < Rational(1)) || f1.d == 1 || f2.d == 1) throw Reject{};
  c.param("num1", f1.n);
  c.param("den1", f1.d);
  c.param("num2", f2.n);
  c.param("den2", f2.d);
  c.p.question = std::string(a.name) + " eats " + show(f1, Fmt::Frac) + " of a " + food + " and " +
                 b.name + " eats " + show(f2, Fmt::Frac) + " of it. What fraction of the " + food +
                 " is left?";
  const int64_t l = std::lcm(f1.d, f2.d);
  if (f1.d != l || f2.d != l)
    c.w.say("Use the common denominator " + std::to_string(l) + ": " + show(f1, Fmt::Frac) + " = " +
            std::to_string(f1.n * (l / f1.d)) + "/" + std::to_string(l) + " and " +
            show(f2, Fmt::Frac) + " = " + std::to_string(f2.n * (l / f2.d)) + "/" +
            std::to_string(l) + ".");
  const Rational eaten = c.w.calc("Eaten: ", {F(f1), F(f2)}, "+", Fmt::Frac);
  const Rational left = c.w.calc("Left: ", {I(1), F(eaten)}, "-", Fmt::Frac);
  return {left, Rational(1) - f1 - f2};
}

std::pair<Rational, Rational> t_fraction_of(Ctx& c) {
  const char* group =
      c.pick({"a class", "a choir", "a sports club", "a chess club", "an orchestra"});
  const int64_t q = c.pick(std::vector<int64_t>{3, 4, 5, 6, 8});
  const int64_t p = c.r(1, q - 1);
  const Rational f(p, q);
  const Rational n = c.param("total", f.d * c.r(3, 12));
  c.param("num", f.n);
  c.param("den", f.d);
  c.p.question = std::string("There are ") + show(n, Fmt::Int) + " people in " + group + ". " +
                 cap(show(f, Fmt::Frac)) + " of them wear glasses. How many do not wear glasses?";
  const Rational unit = c.w.calc("One part: ", {I(n), I(f.d)}, "/", Fmt::Int);
  const Rational g = c.w.calc("Wearing glasses: ", {I(unit), I(f.n)}, "*", Fmt::Int);
  const Rational rest = c.w.calc("Not wearing glasses: ", {I(n), I(g)}, "-", Fmt::Int);
  return {rest, n * (Rational(1) - f)};
}

std::pair<Rational, Rational> t_average(Ctx& c) {
  const Person& a = c.pick(people());
  const int k = int(c.r(3, 6));
  std::vector<Num> xs;
  std::string list;
  Rational sum = 0;
  for (int i = 0; i < k; ++i) {
    const Rational s = c.param("score" + std::to_string(i + 1), c.r(55, 100));
    xs.push_back(I(s));
    sum = sum + s;
    list += (i == 0 ? "" : (i + 1 == k ? " and " : ", ")) + show(s, Fmt::Int);
  }
  if (decimal_places(sum / k, 2) < 0) throw Reject{};
  c.p.question = std::string(a.name) + " scored " + list + " on " + std::to_string(k) +
                 " tests. What is " + a.poss + " average score?";
  const Rational total =
      c.w.calc("Sum of the scores: ", xs, std::string(size_t(k - 1), '+'), Fmt::Int);
  const Rational avg = c.w.calc("Average: ", {I(total), I(k)}, "/", Fmt::Dec);
  Rational closed = 0;
  for (const auto& [name, v] : c.p.params) closed = closed + v;
  return {avg, closed / Rational(int64_t(c.p.params.size()))};
}

std::pair<Rational, Rational> t_fence(Ctx& c) {
  c.fmt = Fmt::Money;
  const char* place = c.pick({"garden", "playground", "field", "yard", "paddock"});
  const Rational len = c.param("length", Rational(c.r(8, 60), 2));
  const Rational wid = c.param("width", Rational(c.r(6, 40), 2));
  const Rational cost = c.param("cost_per_m", Rational::cents(c.r(2, 30) * 25));
  c.p.question = "A rectangular " + std::string(place) + " is " + show(len, Fmt::Dec) +
                 " m long and " + show(wid, Fmt::Dec) + " m wide. Fencing costs " +
                 show(cost, Fmt::Money) +
                 " per metre. How much does it cost to fence all the way around?";
  const Rational half = c.w.calc("Length plus width: ", {D(len), D(wid)}, "+", Fmt::Dec, "m");
  const Rational per = c.w.calc("Perimeter: ", {I(2), D(half)}, "*", Fmt::Dec, "m");
  const Rational total = c.w.calc("Cost: ", {D(per), M(cost)}, "*", Fmt::Money);
  return {total, 2 * (len + wid) * cost};
}

std::pair<Rational, Rational> t_carpet(Ctx& c) {
  c.fmt = Fmt::Money;
  const char* room = c.pick({"living room", "bedroom", "office", "classroom", "hallway"});
  const Rational len = c.param("length", c.r(3, 12));
  const Rational wid = c.param("width", c.r(2, 9));
  const Rational price = c.param("price_per_m2", Rational::cents(c.r(8, 60) * 50));
  c.p.question = cap(a_an(room)) + " measures " + show(len, Fmt::Int) + " m by " +
                 show(wid, Fmt::Int) + " m. Carpet costs " + show(price, Fmt::Money) +
                 " per square metre. How much does carpet for the whole floor cost?";
  const Rational area = c.w.calc("Floor area: ", {I(len), I(wid)}, "*", Fmt::Int, "square metres");
  const Rational total = c.w.calc("Cost: ", {I(area), M(price)}, "*", Fmt::Money);
  return {total, len * wid * price};
}

std::pair<Rational, Rational> t_ratio(Ctx& c) {
  auto [a, b] = c.two_people();
  const Rational ra = c.param("ratio_a", c.r(1, 7));
  Rational rb;
  do rb = c.r(1, 9);
  while (rb == ra);
  c.param("ratio_b", rb);
  const Rational unit = c.r(2, 30);
  const Rational total = c.param("total", (ra + rb) * unit);
  const char* what = c.pick({"dollars", "stickers", "points", "marbles", "euros"});
  c.p.question = std::string(a.name) + " and " + b.name + " share " + show(total, Fmt::Int) + " " +
                 what + " in the ratio " + show(ra, Fmt::Int) + ":" + show(rb, Fmt::Int) +
                 ". How many " + what + " does " + b.name + " get?";
  const Rational parts = c.w.calc("Total parts: ", {I(ra), I(rb)}, "+", Fmt::Int);
  const Rational one = c.w.calc("One part: ", {I(total), I(parts)}, "/", Fmt::Int, what);
  const Rational share =
      c.w.calc(std::string(b.name) + "'s share: ", {I(one), I(rb)}, "*", Fmt::Int, what);
  return {share, total * rb / (ra + rb)};
}

std::pair<Rational, Rational> t_interest(Ctx& c) {
  c.fmt = Fmt::Money;
  const Person& a = c.pick(people());
  const Rational principal = c.param("principal", c.r(2, 80) * 100);
  const Rational rate = c.param("rate_percent", c.pick(std::vector<int64_t>{2, 3, 4, 5, 6, 8}));
  const Rational years = c.param("years", c.r(2, 6));
  c.p.question = std::string(a.name) + " deposits " + show(principal, Fmt::Money) +
                 " in an account that pays " + show(rate, Fmt::Int) +
                 "% simple interest per year. How much is in the account after " +
                 show(years, Fmt::Int) + " years?";
  const Rational yearly =
      c.w.calc("Interest per year: ", {M(principal), I(rate), I(100)}, "*/", Fmt::Money);
  const Rational interest =
      c.w.calc("Interest over all the years: ", {M(yearly), I(years)}, "*", Fmt::Money);
  const Rational total = c.w.calc("Balance: ", {M(principal), M(interest)}, "+", Fmt::Money);
  return {total, principal * (Rational(1) + rate * years / 100)};
}

std::pair<Rational, Rational> t_consecutive(Ctx& c) {
  const Rational first = c.r(3, 300);
  const Rational sum = c.param("sum", 3 * first + 3);
  c.p.question = "The sum of three consecutive whole numbers is " + show(sum, Fmt::Int) +
                 ". What is the largest of the three numbers?";
  c.w.say("Call the numbers n, n + 1 and n + 2; together they are 3n + 3.");
  const Rational three_n = c.w.calc("Three times the smallest: ", {I(sum), I(3)}, "-", Fmt::Int);
  const Rational n = c.w.calc("Smallest: ", {I(three_n), I(3)}, "/", Fmt::Int);
  const Rational largest = c.w.calc("Largest: ", {I(n), I(2)}, "+", Fmt::Int);
  return {largest, sum / 3 + 1};
}

std::pair<Rational, Rational> t_time_convert(Ctx& c) {
  const char* what =
      c.pick({"A film", "A football match", "A flight", "A concert", "A board game session"});
  const Rational h = c.param("hours", c.r(1, 4));
  const Rational m = c.param("minutes", c.r(1, 59));
  const Rational break_min = c.param("break_minutes", c.r(0, 3) * 5);
  c.p.question =
      std::string(what) + " lasts " + show(h, Fmt::Int) +
      (h == Rational(1) ? " hour and " : " hours and ") + show(m, Fmt::Int) + " minutes" +
      (break_min == Rational(0) ? std::string()
                                : ", plus a break of " + show(break_min, Fmt::Int) + " minutes") +
      ". How many minutes is that in total?";
  const Rational hm = c.w.calc("Hours in minutes: ", {I(h), I(60)}, "*", Fmt::Int, "minutes");
  Rational total = c.w.calc("Adding the minutes: ", {I(hm), I(m)}, "+", Fmt::Int, "minutes");
  if (!(break_min == Rational(0)))
    total = c.w.calc("With the break: ", {I(total), I(break_min)}, "+", Fmt::Int, "minutes");
  return {total, h * 60 + m + break_min};
}

std::pair<Rational, Rational> t_savings(Ctx& c) {
  const Person& a = c.pick(people());
  const char* item =
      c.pick({"bicycle", "guitar", "tablet", "pair of skates", "telescope", "camera"});
  const Rational weekly = c.param("weekly", c.r(2, 25) * 5);
  const Rational weeks = c.r(2, 30);
  const Rational have = c.param("saved", c.r(0, 20) * 5);
  const Rational price = c.param("price", weekly * weeks + have);
  c.p.question = std::string(a.name) + " wants a " + item + " that costs " +
                 show(price, Fmt::Money) + ". " + cap(a.subj) + " has already saved " +
                 show(have, Fmt::Money) + " and saves " + show(weekly, Fmt::Money) +
                 " every week. How many weeks will it take to have enough?";
  const Rational need = c.w.calc("Still needed: ", {M(price), M(have)}, "-", Fmt::Money);
  const Rational w = c.w.calc("Weeks: ", {M(need), M(weekly)}, "/", Fmt::Int, "weeks");
  return {w, (price - have) / weekly};
}

std::pair<Rational, Rational> t_multi_step_bakery(Ctx& c) {
  c.fmt = Fmt::Money;
  const char* shop = c.pick({"A bakery", "A café", "A market stall", "A school fair"});
  const char* thing = c.pick({"muffins", "rolls", "cupcakes", "pretzels", "cookies"});
  const Rational trays = c.param("trays", c.r(3, 12));
  const Rational per = c.param("per_tray", c.r(6, 24));
  const Rational unsold = c.param("unsold", c.r(0, 10));
  const Rational price = c.param("price", Rational::cents(c.r(3, 20) * 25));
  if (!(unsold < trays * per)) throw Reject{};
  c.p.question = std::string(shop) + " bakes " + show(trays, Fmt::Int) + " trays of " +
                 show(per, Fmt::Int) + " " + thing + ". It sells all but " +
                 show(unsold, Fmt::Int) + " of them at " + show(price, Fmt::Money) +
                 " each. How much money does it take in?";
  const Rational made = c.w.calc("Baked: ", {I(trays), I(per)}, "*", Fmt::Int, thing);
  const Rational sold = c.w.calc("Sold: ", {I(made), I(unsold)}, "-", Fmt::Int, thing);
  const Rational money = c.w.calc("Money taken: ", {I(sold), M(price)}, "*", Fmt::Money);
  return {money, (trays * per - unsold) * price};
}

const std::vector<std::pair<std::string, Template>>& templates() {
  static const std::vector<std::pair<std::string, Template>> t = {
      {"add_sub", t_add_sub},
      {"groups", t_groups},
      {"sharing", t_sharing},
      {"shopping_change", t_shopping_change},
      {"discount", t_discount},
      {"tax_total", t_tax_total},
      {"unit_rate", t_unit_rate},
      {"distance", t_distance},
      {"average_speed", t_average_speed},
      {"travel_time", t_travel_time},
      {"work_rate", t_work_rate},
      {"percent_of", t_percent_of},
      {"percent_change", t_percent_change},
      {"ages_multiple", t_ages_multiple},
      {"ages_difference", t_ages_difference},
      {"fraction_add", t_fraction_add},
      {"fraction_of", t_fraction_of},
      {"average", t_average},
      {"fence", t_fence},
      {"carpet", t_carpet},
      {"ratio", t_ratio},
      {"interest", t_interest},
      {"consecutive", t_consecutive},
      {"time_convert", t_time_convert},
      {"savings", t_savings},
      {"bakery", t_multi_step_bakery},
  };
  return t;
}

}  // namespace

std::string MathProblem::text() const {
  return "Question: " + question + "\n\nSolution:\n" + solution;
}

Rational MathProblem::param(const std::string& name) const {
  for (const auto& [k, v] : params)
    if (k == name) return v;
  throw std::out_of_range("math problem has no parameter " + name);
}

const std::vector<std::string>& math_problem_kinds() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> v;
    for (const auto& [name, fn] : templates()) v.push_back(name);
    return v;
  }();
  return k;
}

MathProblem generate_math_problem(uint64_t seed) {
  const auto& ts = templates();
  Rng pick_rng = Rng::from_word(mix64(seed ^ 0x6d617468ULL));
  const auto& [kind, fn] = ts[size_t(pick_rng.below(ts.size()))];
  for (uint64_t attempt = 0;; ++attempt) {
    Rng rng = Rng::from_word(mix64(seed * 0x9e3779b97f4a7c15ULL + attempt));
    MathProblem p;
    p.kind = kind;
    Ctx c{rng, p, {}};
    try {
      const auto [stepwise, closed] = fn(c);
      if (!(stepwise == closed))
        throw std::logic_error("math template " + kind + ": stepwise answer " +
                               to_string(stepwise) + " differs from the closed form " +
                               to_string(closed));
      p.answer = stepwise;
      // Money answers keep their cents ("Answer: 3.50"), fractions print as a/b.
      p.answer_text = show(p.answer, c.fmt);
      if (!p.answer_text.empty() && p.answer_text[0] == '$') p.answer_text.erase(0, 1);
      p.solution = c.w.text() + "Answer: " + p.answer_text;
      int n = 0;
      std::string bad;
      if (!verify_equations(p.solution, &n, &bad) || n == 0) continue;  // a printed step is inexact
      return p;
    } catch (const Reject&) {
      continue;
    } catch (const std::overflow_error&) {
      continue;
    }
  }
}

}  // namespace dspark::data
