"""The web console's static files (index.html, app.js, style.css), served by metrics/http.py at /console/."""
