// refwire's Seastar RPC testee: the real Seastar RPC library (src/rpc/) as the
// testee of `refwire conform seastar-rpc`, in both roles.  Our own program, built
// as one more Seastar demo by peers/seastar/build.sh (so with the library's flags).
//
// Server (--listen HOST:PORT, port 0 = any): registers the conformance verbs of
// specs/seastar-rpc/README.md §11 (echo 100, sleep_ms 101, raise 102, size 103)
// on raw bytes, with a streaming domain, a memory limit (--max-memory, default
// 16 MiB) and a compressor factory (--compress multi | lz4 | lz4-fragmented |
// none).  Prints `listening on HOST:PORT` once it accepts connections.
//
// Client (--connect HOST:PORT): the §12 contract: --events payloads drawn from a
// PRNG seeded with --seed (1 to 64 bytes each), all echo calls (verb 100) in
// flight at once with a 10 s timeout each; exit 0 only when every reply equals
// its payload, else 1.  --case is accepted and ignored (every §12 case is
// supported).
//
// Run with `-c1 -m256M --overprovisioned --reactor-backend=epoll` on a small
// shared machine.

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <seastar/core/app-template.hh>
#include <seastar/core/future-util.hh>
#include <seastar/core/loop.hh>
#include <seastar/core/reactor.hh>
#include <seastar/core/seastar.hh>
#include <seastar/core/signal.hh>
#include <seastar/core/sleep.hh>
#include <seastar/net/api.hh>
#include <seastar/net/inet_address.hh>
#include <seastar/rpc/lz4_compressor.hh>
#include <seastar/rpc/lz4_fragmented_compressor.hh>
#include <seastar/rpc/multi_algo_compressor_factory.hh>
#include <seastar/rpc/rpc.hh>
#include <seastar/util/log.hh>

using namespace seastar;
namespace bpo = boost::program_options;

// The conformance verbs carry raw bytes: no length prefix, no framing of our own.
struct serializer {};

// Request or reply data as it is on the wire: all the bytes there are.
struct raw {
    sstring data;
};

// sleep_ms's argument: exactly 4 bytes (anything else fails to deserialize: no reply).
struct ms_arg {
    uint32_t ms;
};

// size's argument: only the number of bytes is kept.
struct counted {
    uint64_t n;
};

template <typename Output>
inline void write(serializer, Output& out, const raw& v) {
    out.write(v.data.data(), v.data.size());
}

template <typename Input>
inline raw read(serializer, Input& in, rpc::type<raw>) {
    raw r{uninitialized_string(in.size())};
    in.read(r.data.data(), r.data.size());
    return r;
}

template <typename Input>
inline ms_arg read(serializer, Input& in, rpc::type<ms_arg>) {
    if (in.size() != 4) {
        throw std::runtime_error("sleep_ms takes exactly 4 bytes");
    }
    uint32_t v;
    in.read(reinterpret_cast<char*>(&v), 4);
    return ms_arg{le_to_cpu(v)};
}

template <typename Input>
inline counted read(serializer, Input& in, rpc::type<counted>) {
    counted c{in.size()};
    in.skip(in.size());
    return c;
}

// (Never sent by this program; the protocol's client side of each verb needs them to compile.)
template <typename Output>
inline void write(serializer, Output& out, const ms_arg& v) {
    uint32_t le = cpu_to_le(v.ms);
    out.write(reinterpret_cast<const char*>(&le), sizeof(le));
}

template <typename Output>
inline void write(serializer, Output& out, const counted& v) {
    for (uint64_t i = 0; i < v.n; i++) {
        out.write("", 1);
    }
}

template <typename Output>
inline void write(serializer, Output& out, uint64_t v) {
    v = cpu_to_le(v);
    out.write(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename Input>
inline uint64_t read(serializer, Input& in, rpc::type<uint64_t>) {
    uint64_t v;
    in.read(reinterpret_cast<char*>(&v), sizeof(v));
    return le_to_cpu(v);
}

enum verb : uint32_t { ECHO = 100, SLEEP_MS = 101, RAISE = 102, SIZE = 103 };

static logger tlog("seastar-testee");

static std::pair<sstring, uint16_t> split_hostport(const std::string& s) {
    auto colon = s.rfind(':');
    if (colon == std::string::npos) {
        throw std::invalid_argument("HOST:PORT expected, got " + s);
    }
    return {sstring(s.substr(0, colon)), uint16_t(std::stoul(s.substr(colon + 1)))};
}

using proto_t = rpc::protocol<serializer>;

static std::unique_ptr<proto_t> proto;
static std::unique_ptr<proto_t::server> server;
static rpc::lz4_compressor::factory lz4_factory;
static rpc::lz4_fragmented_compressor::factory lz4_fragmented_factory;
static std::unique_ptr<rpc::multi_algo_compressor_factory> multi_factory;

static future<int> serve(const bpo::variables_map& config) {
    proto = std::make_unique<proto_t>(serializer{});
    proto->set_logger(&tlog);
    proto->register_handler(ECHO, [](raw payload) { return payload; });
    proto->register_handler(SLEEP_MS, [](ms_arg a) {
        return sleep(std::chrono::milliseconds(a.ms)).then([a] {
            uint32_t le = cpu_to_le(a.ms);
            return raw{sstring(reinterpret_cast<const char*>(&le), 4)};
        });
    });
    proto->register_handler(RAISE, [](raw text) -> raw { throw std::runtime_error(std::string(text.data)); });
    proto->register_handler(SIZE, [](counted c) { return c.n; });

    rpc::server_options so;
    so.streaming_domain = rpc::streaming_domain_type(0x5eed);
    auto compress = config["compress"].as<std::string>();
    if (compress == "multi") {
        multi_factory = std::make_unique<rpc::multi_algo_compressor_factory>(
                std::vector<const rpc::compressor::factory*>{&lz4_factory, &lz4_fragmented_factory});
        so.compressor_factory = multi_factory.get();
    } else if (compress == "lz4") {
        so.compressor_factory = &lz4_factory;
    } else if (compress == "lz4-fragmented") {
        so.compressor_factory = &lz4_fragmented_factory;
    } else if (compress != "none") {
        throw std::invalid_argument("--compress: multi, lz4, lz4-fragmented or none, not " + compress);
    }
    rpc::resource_limits limits;
    limits.basic_request_size = 0;
    limits.bloat_factor = 1;
    limits.max_memory = config["max-memory"].as<size_t>();

    auto [host, port] = split_hostport(config["listen"].as<std::string>());
    listen_options lo;
    lo.reuse_address = true;
    auto ss = seastar::listen(socket_address(net::inet_address(host), port), lo);
    auto bound = ss.local_address();
    server = std::make_unique<proto_t::server>(*proto, so, std::move(ss), limits);
    std::cout << "listening on " << host << ":" << bound.port() << std::endl;
    // Serve until SIGINT or SIGTERM, then stop the server (its connections) and exit 0.
    auto stopping = make_lw_shared<promise<>>();
    auto stopped = make_lw_shared<bool>(false);
    for (int signo : {SIGINT, SIGTERM}) {
        handle_signal(signo, [stopping, stopped] {
            if (!std::exchange(*stopped, true)) {
                stopping->set_value();
            }
        }, true);
    }
    // The server and protocol are destroyed here, on the reactor: left to static destruction they
    // would be torn down after the reactor is gone (a SIGSEGV on every stop).
    return stopping->get_future().then([stopping] { return server->stop(); }).then([] {
        server.reset();
        proto.reset();
        return 0;
    });
}

static future<int> run_client(const bpo::variables_map& config) {
    auto [host, port] = split_hostport(config["connect"].as<std::string>());
    auto events = config["events"].as<unsigned>();
    std::mt19937_64 rng(config["seed"].as<uint64_t>());
    std::vector<sstring> payloads;
    for (unsigned i = 0; i < events; i++) {
        auto n = std::uniform_int_distribution<size_t>(1, 64)(rng);
        sstring p = uninitialized_string(n);
        for (auto& ch : p) {
            ch = char(rng() & 0xff);
        }
        payloads.push_back(std::move(p));
    }
    proto = std::make_unique<proto_t>(serializer{});
    proto->set_logger(&tlog);
    rpc::client_options co;
    auto client = make_lw_shared<proto_t::client>(*proto, co, socket_address(net::inet_address(host), port));
    auto echo = proto->make_client<raw (raw)>(ECHO);
    auto failures = make_lw_shared<unsigned>(0);
    auto deadline = rpc::rpc_clock_type::now() + std::chrono::seconds(10);
    std::vector<future<>> calls;
    for (auto& p : payloads) {
        calls.push_back(echo(*client, deadline, raw{p}).then_wrapped([failures, p](future<raw> f) {
            try {
                auto got = f.get();
                if (got.data != p) {
                    tlog.error("reply differs from its payload ({} bytes back, {} sent)", got.data.size(), p.size());
                    ++*failures;
                }
            } catch (...) {
                tlog.error("call failed: {}", std::current_exception());
                ++*failures;
            }
        }));
    }
    return when_all_succeed(calls.begin(), calls.end()).then([client, failures, events] {
        std::cout << (events - *failures) << " of " << events << " echoed" << std::endl;
        // The client must outlive its stop() (whose promise it holds).
        return client->stop().then([client, failures] { return *failures ? 1 : 0; });
    });
}

int main(int ac, char** av) {
    app_template::seastar_options opts;
    opts.name = "seastar-testee";
    opts.description = "refwire's Seastar RPC testee (specs/seastar-rpc/README.md §11, §12)";
    app_template app(std::move(opts));
    app.add_options()
        ("listen", bpo::value<std::string>(), "server: serve the conformance verbs on HOST:PORT (port 0: any)")
        ("compress", bpo::value<std::string>()->default_value("multi"), "server: multi | lz4 | lz4-fragmented | none")
        ("max-memory", bpo::value<size_t>()->default_value(16u << 20), "server: resource_limits::max_memory (bytes)")
        ("connect", bpo::value<std::string>(), "client: run the §12 contract against HOST:PORT")
        ("events", bpo::value<unsigned>()->default_value(1), "client: how many echo calls")
        ("seed", bpo::value<uint64_t>()->default_value(0), "client: the PRNG seed of the payloads")
        ("case", bpo::value<std::string>()->default_value(""), "client: the case id (all are supported)");
    return app.run(ac, av, [&app]() -> future<int> {
        auto& config = app.configuration();
        if (config.count("listen")) {
            return serve(config);
        }
        if (config.count("connect")) {
            return run_client(config);
        }
        std::cerr << "seastar-testee: --listen HOST:PORT or --connect HOST:PORT" << std::endl;
        return make_ready_future<int>(2);
    });
}
