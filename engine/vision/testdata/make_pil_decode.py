# PIL's decode of the preprocessing fixture's JPEG (libjpeg-turbo, default settings), as raw 8-bit RGB
# [h, w, 3], so that engine/vision's tests can check the resampling separately from the JPEG decoder.
import io, os, sys, tarfile
from PIL import Image, features
OUT = os.environ.get("OUT", "/tmp/out")
os.makedirs(OUT, exist_ok=True)
with tarfile.open("testdata/gemma3n-preprocess.tar.gz") as tar:
    raw = tar.extractfile("gemma3n-preprocess/go-turns-two-280x360.jpeg").read()
img = Image.open(io.BytesIO(raw)).convert("RGB")
print("PIL", Image.__version__, "libjpeg-turbo", features.version("libjpeg_turbo"), img.size, img.mode)
open(os.path.join(OUT, "go-turns-two-280x360.pil.rgb"), "wb").write(img.tobytes())
