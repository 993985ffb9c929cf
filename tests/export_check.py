"""export_check.py - the checks of tests/export_models.sh, in the
checkers' virtual environment (tests/setup-venv.sh).

    python export_check.py models DIR JOB...
        per DIR/JOB: onnx.checker accepts model.onnx (full check, opset
        >= 17); onnxruntime's outputs on the raw records (JOB/<input>.raw)
        equal dtf-train's own forward (JOB/logits.f32) within 1e-5 max
        absolute difference; model.safetensors, loaded by safetensors and
        by numpy alone, holds every variable of JOB/ckpt.dtf (read here from
        the documented checkpoint layout) under its name, bit for bit, and
        nothing else.  Prints one line per job: the difference and
        onnxruntime's records/s.
    python export_check.py header CKPT
        prints "world step" of a checkpoint file's header.
"""
import json
import struct
import sys
import time

import numpy as np

TOL = 1e-5


def read_checkpoint(path):
    """The tensors of a dtf-train checkpoint (dtf-train-job(5),
    CHECKPOINTS): {name: (dtype code, dims, bytes)} and the header."""
    data = open(path, "rb").read()
    assert data[:8] == b"DTFCKPT\0", path
    step, = struct.unpack_from("<q", data, 24)
    world, = struct.unpack_from("<I", data, 56)
    count, = struct.unpack_from("<I", data, 80)
    pos, out = 88, {}
    for _ in range(count):
        n, = struct.unpack_from("<H", data, pos)
        name = data[pos + 2:pos + 2 + n].decode()
        pos += 2 + n
        dtype, rank = data[pos], data[pos + 1]
        pos += 4
        dims = struct.unpack_from("<%dQ" % rank, data, pos)
        pos += 8 * rank
        off, nbytes = struct.unpack_from("<QQ", data, pos)
        pos += 20
        out[name] = (dtype, dims, data[off:off + nbytes])
    return out, world, step


def is_variable(name):
    return not (name.startswith(("optimizer/", "rng/", "pipeline/"))
                or name == "global_step")


def numpy_safetensors(path):
    """The safetensors layout read with numpy alone."""
    raw = open(path, "rb").read()
    n, = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t)
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(raw[base + b:base + e], "<f4").reshape(t["shape"])
    return out


def check_model(d, job):
    import onnx
    import onnxruntime as ort
    from safetensors.numpy import load_file

    m = onnx.load(f"{d}/{job}/model.onnx")
    onnx.checker.check_model(m, full_check=True)
    opset = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
    assert opset and opset[0] >= 17, opset
    sess = ort.InferenceSession(f"{d}/{job}/model.onnx",
                                providers=["CPUExecutionProvider"])
    types = {"tensor(uint8)": np.uint8, "tensor(int8)": np.int8,
             "tensor(float)": np.float32, "tensor(float16)": np.float16}
    feeds = {}
    for i in sess.get_inputs():
        want = types[i.type]
        stored = want if want in (np.uint8, np.int8) else np.float32
        v = np.fromfile(f"{d}/{job}/{i.name}.raw", dtype=stored)
        feeds[i.name] = v.astype(want).reshape([-1] + list(i.shape[1:]))
    ref = np.fromfile(f"{d}/{job}/logits.f32", dtype="<f4")
    n = next(iter(feeds.values())).shape[0]
    out = sess.run(None, feeds)[0]
    ref = ref.reshape(out.shape)
    diff = float(np.max(np.abs(out.astype(np.float64) - ref)))
    assert n == 1000 and diff <= TOL, (job, n, diff)
    # predict --outputs logits: file,record,logit_0,... per record, in the
    # records' order; %.9g gives each float32 back exactly
    rows = [line.rstrip("\n").split(",")
            for line in open(f"{d}/{job}/predict.csv")][1:]
    assert len(rows) == n, (job, len(rows))
    assert [int(r[1]) for r in rows] == list(range(n)), job
    pred = np.array([[float(v) for v in r[2:]] for r in rows], np.float32)
    pred = pred.reshape(out.shape)
    # (another batch size: OpenBLAS may block the products otherwise)
    fdiff = float(np.max(np.abs(pred.astype(np.float64) - ref)))
    pdiff = float(np.max(np.abs(out.astype(np.float64) - pred)))
    assert fdiff <= TOL and pdiff <= TOL, (job, fdiff, pdiff)
    # records/s: the 1,000 records in batches of 100, best of 3 rounds
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        for b in range(0, n, 100):
            sess.run(None, {k: v[b:b + 100] for k, v in feeds.items()})
        t = time.perf_counter() - t0
        best = t if best is None or t < best else best

    tensors, _, _ = read_checkpoint(f"{d}/{job}/ckpt.dtf")
    variables = {k: v for k, v in tensors.items() if is_variable(k)}
    for loaded in (load_file(f"{d}/{job}/model.safetensors"),
                   numpy_safetensors(f"{d}/{job}/model.safetensors")):
        assert set(loaded) == set(variables), (set(loaded) ^ set(variables))
        for k, (dtype, dims, raw) in variables.items():
            a = loaded[k]
            assert dtype == 1 and a.dtype == np.float32, (k, dtype, a.dtype)
            assert tuple(a.shape) == tuple(dims), (k, a.shape, dims)
            assert a.astype("<f4").tobytes() == raw, k
    print(f"{job}: onnx.checker ok (opset {opset[0]}), "
          f"max |onnxruntime - dtf-train| {diff:.3g} over {n} records "
          f"(against dtf-train predict --outputs logits: {pdiff:.3g}), "
          f"onnxruntime {n / best:.0f} records/s (batch 100, "
          f"{sess.get_providers()[0]}), safetensors {len(variables)} "
          f"variables bit for bit")


def main():
    if sys.argv[1] == "header":
        _, world, step = read_checkpoint(sys.argv[2])
        print(world, step)
        return
    d = sys.argv[2]
    import onnx
    import onnxruntime
    print(f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}")
    for job in sys.argv[3:]:
        check_model(d, job)


main()
