// C++ names for the demangling tests.
#include <cstdio>

namespace geo {
struct Shape {
    virtual ~Shape() {}
    virtual double area(int scale) const = 0;
};
struct Square : Shape {
    double side = 2;
    double area(int scale) const override { return side * side * scale; }
};
template <typename T> T twice(T x) { return x + x; }
}  // namespace geo

__attribute__((noinline)) double total(const geo::Shape &s, int n) {
    return geo::twice<double>(s.area(n));
}

int main(int argc, char **) {
    geo::Square sq;
    std::printf("%f\n", total(sq, argc));
    return 0;
}
